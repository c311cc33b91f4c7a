"""Annotator quality: position-bias and agreement screens, inter-annotator agreement, gold (attention-check) cells."""
