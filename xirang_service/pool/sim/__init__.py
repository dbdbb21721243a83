"""The trace-driven simulator: the pool engine and a policy plugin replayed over a job trace."""
