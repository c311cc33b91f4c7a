"""scripts/ run end to end."""
