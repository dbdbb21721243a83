"""``python -m xirang``: the ``xirang`` command, except that with no arguments it trains the
embedded default (the ``xirang`` command then lists its subcommands)."""

import os
import sys


def _own_package() -> None:
    """Run from a folder that holds another ``xirang`` directory (a checkout's parent, a
    project named after it), ``python -m`` puts that folder first on ``sys.path`` and
    ``xirang`` becomes a namespace package without this package's names, so every plugin's
    ``from xirang import ...`` fails. Drop the folder's entry and import the real package."""
    if getattr(sys.modules.get("xirang"), "__file__", None) is not None:
        return
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", here)]
    del sys.modules["xirang"]
    import xirang  # noqa: F401  (this package, now from where it is installed)


_own_package()

from xirang_core.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(bare_trains=True))
