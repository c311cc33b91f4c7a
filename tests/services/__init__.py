"""Tests of services/: the HTTP API, the store, the command line, the crowd round trip."""
