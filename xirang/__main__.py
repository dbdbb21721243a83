"""``python -m xirang``: the same as the ``xirang`` command."""

from xirang_core.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
