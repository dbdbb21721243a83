"""The core's Hydra configs, installed as the package ``xirang_conf``."""
