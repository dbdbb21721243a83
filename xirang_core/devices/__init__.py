"""Device-independent helpers every device backend reuses: calibration and its cache."""
