"""benchmarks/ run end to end at tiny sizes."""
