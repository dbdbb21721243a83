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
    """The command that started this run, runnable as is from any folder: under torchrun (or
    a launcher that runs it, ``accelerate launch``) the launcher's own command, since a plain
    ``python -m xirang`` would start a one-worker run instead."""
    launcher = elastic_launcher()
    args = shlex.join(sys.argv[1:])
    command = slurm_step() + launcher if launcher else f"python -m xirang {args}".rstrip()
    return f"cd {shlex.quote(os.getcwd())} && {command}"


def slurm_step() -> str:
    """``srun`` with the Slurm step's nodes, tasks and CPUs per task, when the launcher runs
    as one (``srun torchrun ...``, a batch job's recipe); "" otherwise. The torchrun command
    alone would train outside Slurm, on whatever node it is typed."""
    env = os.environ
    if "SLURM_STEP_NUM_TASKS" not in env:
        return ""
    options = [f"--nodes={env.get('SLURM_STEP_NUM_NODES', '1')}"]
    options.append(f"--ntasks={env['SLURM_STEP_NUM_TASKS']}")
    if env.get("SLURM_CPUS_PER_TASK"):
        options.append(f"--cpus-per-task={env['SLURM_CPUS_PER_TASK']}")
    return shlex.join(["srun", *options]) + " "


def elastic_launcher() -> str | None:
    """The command line of the torchrun agent that started this worker (its parent process),
    or a torchrun command naming this world when that cannot be read; None outside torchrun."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        raw = b""
    argv = [a.decode() for a in raw.split(b"\0") if a]
    if "xirang" not in argv:  # not the agent that runs ``-m xirang`` (a wrapper, or no /proc)
        env = os.environ
        nnodes = env.get("GROUP_WORLD_SIZE", "1")
        world = f"--nnodes={nnodes} --nproc-per-node={env.get('LOCAL_WORLD_SIZE', '1')}"
        return f"torchrun {world} -m xirang {shlex.join(sys.argv[1:])}".rstrip()
    return shlex.join(_as_typed(argv))


def _as_typed(argv: list[str]) -> list[str]:
    """``python /venv/bin/torchrun ...`` as typed: ``torchrun ...`` when that name on PATH is
    the same script; the interpreter as ``python``."""
    if Path(argv[0]).name.startswith("python"):
        argv = argv[1:] if argv[1:] and not argv[1].startswith("-") else ["python", *argv[1:]]
    found = shutil.which(Path(argv[0]).name)
    if found and Path(found).resolve() == Path(argv[0]).resolve():
        argv = [Path(argv[0]).name, *argv[1:]]
    return argv


def elastic_restarts_left() -> int:
    """How many more times torchrun may restart this worker group (0 outside torchrun):
    until then a failure is torchrun's to recover, not the run's end."""
    env = os.environ
    if "TORCHELASTIC_RUN_ID" not in env:
        return 0
    done, most = env.get("TORCHELASTIC_RESTART_COUNT", "0"), env.get("TORCHELASTIC_MAX_RESTARTS")
    return max(0, int(most or 0) - int(done))


def run_dir_for(config: dict[str, Any], fresh: Path, sweeping: bool = False) -> Path:
    """The newest interrupted run of this config to continue, or ``fresh`` (Hydra's new run
    directory). A sweep's runs, and ``checkpoint.resume`` other than ``auto``, always start
    fresh."""
    if sweeping or config["checkpoint"]["resume"] != "auto":
        return fresh
    root, key = _runs_root(fresh), config_key(config)
    found = elastic_run(root, key, exclude=fresh) or newest_interrupted(root, key, exclude=fresh)
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


def elastic_run(root: Path | None, key: str, exclude: Path) -> Path | None:
    """Under torchrun, the run directory of this torchrun run id (``TORCHELASTIC_RUN_ID``, the
    rendezvous id) and config ``key``, when an earlier attempt made one: a restart of the
    worker group, or the same ``--rdzv-id`` again, continues that run rather than starting one
    from step 1. The key matters because torchrun without a rendezvous (``srun torchrun
    --nproc-per-node=2``, the Slurm recipe) gives every run the id ``none``: another
    command must not take over a stopped run's directory."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if root is None or not run_id or not root.is_dir():
        return None
    for marker in root.glob(f"*/*/{MARKER}"):
        state = _read(marker)
        if marker.parent == exclude or state.get("torchrun_run_id") != run_id:
            continue
        if state.get("config_key") != key:
            continue
        if state.get("state") != "running" or _interrupted(state):  # not live elsewhere
            return marker.parent
    return None


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
        "torchrun_run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
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
        left = elastic_restarts_left()
        if left:  # torchrun restarts the group, which takes this directory up again
            how = f"torchrun may restart it ({left} restart(s) left); else: {state['how']}"
            step = latest_saved_step(run_dir)
            _write(marker, {**state, "state": "interrupted", "step": step, "how": how})
            raise
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
