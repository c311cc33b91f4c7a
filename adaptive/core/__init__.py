"""The shared data one floor down: judgment files read and validated, ranked screens expanded into pairs, judgments as integer cells."""
