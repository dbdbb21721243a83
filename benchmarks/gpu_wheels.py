"""The pure-Python wheels an air-gapped GPU image lacks, fetched on a CPU machine with network.

    python benchmarks/gpu_wheels.py .whl --python-version 3.12

A GPU image with CUDA and torch often has no hydra-core, omegaconf, antlr4 or nvidia-ml-py, and
never xirang; plugins are found only when xirang is installed. This writes those wheels into
``.whl`` (ignored by git): hydra-core and omegaconf downloaded as wheels for the target Python,
antlr4's runtime built into a wheel (PyPI has only its sdist), nvidia-ml-py, and xirang built
from this checkout. ``python benchmarks/gpu_check.py --wheels .whl`` installs them on the GPU
machine without an index. Versions are the ones this environment runs (nvidia-ml-py: the newest).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: published as wheels for any Python 3
DOWNLOADED = ("hydra-core", "omegaconf", "nvidia-ml-py")
#: published only as an sdist: built here into a pure-Python wheel
BUILT = ("antlr4-python3-runtime",)
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64")


def pinned(name: str) -> str:
    """``name==<the version installed here>``, or ``name`` when this environment lacks it."""
    try:
        return f"{name}=={version(name)}"
    except PackageNotFoundError:
        return name


def fetch_commands(dest: Path, python_version: str) -> list[list[str]]:
    """The pip commands, in order: the downloads (network), then xirang's own wheel, built from
    the checkout without build isolation so that it needs no index."""
    pip = [sys.executable, "-m", "pip"]
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    download = [*pip, "download", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    target = ["--python-version", python_version, "--implementation", "cp", *platforms]
    return [
        [*download, *target, *map(pinned, DOWNLOADED)],
        [*pip, "wheel", "--no-deps", "-w", str(dest), *map(pinned, BUILT)],
        xirang_wheel_command(dest),
    ]


def xirang_wheel_command(dest: Path) -> list[str]:
    """``pip wheel`` of this checkout, offline: the environment's setuptools builds it."""
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    return [*pip, "--no-index", "-w", str(dest), str(ROOT)]


def fetch(dest: Path, python_version: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for command in fetch_commands(dest, python_version):
        print("+", " ".join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            sys.exit(f"xirang error: {command[3]} failed (above); is the package index reachable?")
    wheels = sorted(path.name for path in dest.glob("*.whl"))
    print(f"{len(wheels)} wheels in {dest}: {', '.join(wheels)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="folder for the wheels (e.g. .whl, ignored)")
    parser.add_argument(
        "--python-version", default="3.12", help="the GPU image's Python (default 3.12)"
    )
    args = parser.parse_args()
    fetch(args.dest, args.python_version)


if __name__ == "__main__":
    main()
