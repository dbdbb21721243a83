"""The same command resumes an interrupted run, in its own run directory.

A run stopped by Ctrl-C, SIGTERM (preemption, ``scancel``) or a hard kill leaves
``resume.json`` in its run directory: the config's fingerprint, the command that started it and
how to resume it. Running the same command again from the same folder (``checkpoint.resume=auto``,
the default) finds the newest such run of the same config under the runs folder (``outputs/``,
or ``XIRANG_RUNS``) and continues it there, from its latest checkpoint, as torchtitan's and
Determined's fixed run folders do; ``checkpoint.resume=never`` starts a fresh run instead. The
file goes away when the run completes; a run that failed on an error says so in it and is never
picked up by itself (``checkpoint.resume=<run dir>`` still resumes it on purpose).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xirang_core.checkpoint.events import read_events
from xirang_core.train.interrupt import RunInterrupted

log = logging.getLogger("xirang.resume")

MARKER = "resume.json"
#: files Hydra writes into every fresh run directory before the run starts
_HYDRA_ONLY = {".hydra"}


def config_key(config: dict[str, Any]) -> str:
    """The fingerprint of a validated config: equal for the same command (in any key order),
    whatever ``checkpoint.resume`` says."""
    keyed = {**config, "checkpoint": {**config["checkpoint"], "resume": None}}
    text = json.dumps(keyed, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def command_line() -> str:
    """The command that started this run, runnable as is from any folder."""
    args = shlex.join(sys.argv[1:])
    return f"cd {shlex.quote(os.getcwd())} && python -m xirang {args}".rstrip()


def run_dir_for(config: dict[str, Any], fresh: Path, sweeping: bool = False) -> Path:
    """The newest interrupted run of this config to continue, or ``fresh`` (Hydra's new run
    directory). A sweep's runs, and ``checkpoint.resume`` other than ``auto``, always start
    fresh."""
    if sweeping or config["checkpoint"]["resume"] != "auto":
        return fresh
    found = newest_interrupted(_runs_root(fresh), config_key(config), exclude=fresh)
    if found is None:
        return fresh
    _drop_fresh(fresh, found)
    step = latest_saved_step(found)
    log.warning(
        "resuming the interrupted run %s from its checkpoint at step %d "
        "(checkpoint.resume=never starts a fresh run instead)",
        found,
        step,
    )
    return found


def newest_interrupted(root: Path | None, key: str, exclude: Path) -> Path | None:
    """The run under ``root`` (``<day>/<time>`` folders) that was interrupted with a committed
    checkpoint and the same config ``key``, most recently; None when there is none."""
    if root is None or not root.is_dir():
        return None
    found: list[tuple[float, Path]] = []
    for marker in root.glob(f"*/*/{MARKER}"):
        run_dir = marker.parent
        state = _read(marker)
        if run_dir == exclude or state.get("config_key") != key or not _interrupted(state):
            continue
        if latest_saved_step(run_dir):
            found.append((state.get("updated", 0.0), run_dir))
    return max(found)[1] if found else None


def latest_saved_step(run_dir: Path) -> int:
    """The newest committed checkpoint's step (0: none)."""
    return max((e["step"] for e in read_events(run_dir) if e["event"] == "save"), default=0)


@contextlib.contextmanager
def resumable(run_dir: Path, key: str) -> Iterator[None]:
    """While the run goes on its directory says it is running (``key``: its config's
    fingerprint, taken before the runtime was resolved into it); a stop by signal leaves it
    resumable and becomes one line with the command that resumes it; completion removes it."""
    marker = run_dir / MARKER
    state: dict[str, Any] = {
        "state": "running",
        "config_key": key,
        "command": command_line(),
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    state["how"] = _how(state)  # a killed run resumes the same way
    _write(marker, state)
    try:
        yield
    except (RunInterrupted, KeyboardInterrupt) as exc:
        step = latest_saved_step(run_dir)
        _write(marker, {**state, "state": "interrupted", "step": step})
        raise _stopped(exc, run_dir, step, state["command"]) from None
    except BaseException as exc:
        how = (
            f"it failed ({type(exc).__name__}); resume on purpose with checkpoint.resume={run_dir}"
        )
        _write(marker, {**state, "state": "failed", "how": how})
        raise
    marker.unlink(missing_ok=True)


def _stopped(exc: BaseException, run_dir: Path, step: int, command: str) -> RunInterrupted:
    """The one line a stopped run ends with; exit status 130 after Ctrl-C, 143 after TERM."""
    at_once = isinstance(exc, KeyboardInterrupt)
    if not step:
        line = (
            f"stopped before any checkpoint was committed; the same command starts over: {command}"
        )
    elif at_once:
        line = (
            f"stopped at once; latest checkpoint step {step} in {run_dir}. Resume with: {command}"
        )
    else:
        line = f"stopped at step {step}, checkpoint saved in {run_dir}. Resume with: {command}"
    stop = RunInterrupted(line)
    stop.exit_code = 130 if at_once or getattr(exc, "signal", None) == signal.SIGINT else 143
    return stop


def _how(state: dict[str, Any]) -> str:
    return (
        f"if stopped or killed, the same command resumes it: {state['command']} "
        f"(add checkpoint.resume=never to start a fresh run instead)"
    )


def _interrupted(state: dict[str, Any]) -> bool:
    """Stopped by a signal, or still marked running by a process that is gone (killed)."""
    if state.get("state") == "interrupted":
        return True
    if state.get("state") != "running" or state.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(state["pid"]), 0)
    except ProcessLookupError:
        return True
    except (OSError, KeyError, ValueError):
        return False
    return False  # alive: another process is running it now


def _runs_root(fresh: Path) -> Path | None:
    """The folder that holds every run's ``<day>/<time>`` directory (conf/config.yaml's
    ``hydra.run.dir``); None when this run lives elsewhere (a fixed ``hydra.run.dir``, which the
    same command reuses anyway)."""
    root = Path(os.environ.get("XIRANG_RUNS") or "outputs").resolve()
    return root if fresh.resolve().parent.parent == root else None


def _drop_fresh(fresh: Path, adopted: Path) -> None:
    """Remove Hydra's new, still empty run directory; its log goes on in the adopted one."""
    for log_file in fresh.glob("*.log"):
        os.replace(log_file, adopted / f"{log_file.stem}.{fresh.name}.log")
    if {p.name for p in fresh.iterdir()} <= _HYDRA_ONLY:
        shutil.rmtree(fresh, ignore_errors=True)
    with contextlib.suppress(OSError):
        fresh.parent.rmdir()  # the day's folder, when this was its only run


def _read(marker: Path) -> dict[str, Any]:
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return {}


def _write(marker: Path, state: dict[str, Any]) -> None:
    # a name of its own: the launchers of a multi-node job share the run directory
    tmp = marker.with_name(f".{marker.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**state, "updated": time.time()}, indent=2) + "\n")
    tmp.replace(marker)
