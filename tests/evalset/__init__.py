"""Tests of the Python API (import evalset)."""
