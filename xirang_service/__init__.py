"""The pool service beside the kernel: the shared pool (``pool/``), cost accounting (``cost/``),
the web console (``console/``) and what the two web services share (``web/``).

A training run never imports this package (an import-linter contract in pyproject.toml holds
it); the service depends on the kernel, not the other way round. Its web dependencies are the
extra ``xirang[pool]``.
"""
