"""``python -m xirang``: the ``xirang`` command, except that with no arguments it trains the
embedded default (the ``xirang`` command then lists its subcommands)."""

from xirang_core.cli import main

if __name__ == "__main__":
    raise SystemExit(main(bare_trains=True))
