"""The small core of xirang: hook specs, the plugin registry, config, and the run loop."""
