"""Training: one worker's assembly and its loop."""
