"""Cells -> graded-response fits -> posterior snapshots: fit choices and run sizes, significance, streaming re-estimation and skill-only updates, the standard analysis, item fit."""
