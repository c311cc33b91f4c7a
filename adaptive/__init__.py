"""The statistics on integer-indexed arrays, one subpackage per family, layered lowest first: core,
stopping, prompts, estimation, leaderboards, annotation, judge, recommend, simulation. A module
imports only from its own family and the families before it (tests/test_architecture.py checks
it; docs/architecture.md lists the modules of each)."""
