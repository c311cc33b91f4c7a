"""Tests of adaptive/, one folder per family."""
