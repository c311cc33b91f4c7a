"""Replays and simulations of annotation policies and hybrid campaigns, judged by the judgments they spend."""
