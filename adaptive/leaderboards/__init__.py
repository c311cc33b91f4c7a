"""Leaderboards from pairwise judgments without the graded response model: Bradley-Terry analyses, the Arena-style Elo leaderboard, MRBench's graded labels."""
