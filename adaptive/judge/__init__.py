"""Hybrid decisions: an automatic judge's verdict on every cell, humans on some."""
