"""Parallel plans: the plan record, memory and time models, the planner and its smoke run.

Strategies that carry a plan out live in plugins (``xirang_torch``, ``xirang_colossalai``, ...);
this package only reasons about plans, so it imports no accelerator library at import time.
"""
