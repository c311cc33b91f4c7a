"""Tests of stan_free_models/: the models and their inference."""
