"""The tiny GPT config of the parallel tests."""

from tests.parallel.conftest import tiny_config  # noqa: F401
