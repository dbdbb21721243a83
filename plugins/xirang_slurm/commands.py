"""Thin, checked wrappers over Slurm's command-line tools."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Mapping
from datetime import datetime

from xirang import XirangError


class SlurmError(XirangError):
    """A Slurm command is missing or refused a request."""


class SlurmTimeout(SlurmError):
    """A Slurm command got no answer in time (slurmctld stalled or overloaded): what it asked
    may still happen (an sbatch's job may still be made), so its outcome is unknown."""


#: seconds a Slurm command may take: slurmctld answers in milliseconds when healthy; a
#: stalled one must cost the pool seconds, never minutes
TIMEOUT = 10.0


def run(
    *args: str,
    input_text: str | None = None,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run a Slurm tool (with ``env`` in place of this process's environment, if given); its
    stderr becomes the error message when it fails, and no answer within ``timeout`` (else
    :data:`TIMEOUT`) is a :class:`SlurmTimeout`."""
    timeout = timeout or TIMEOUT
    if shutil.which(args[0]) is None:
        raise SlurmError(
            f"{args[0]} is not installed here; install Slurm (Debian: apt-get install "
            "slurm-wlm munge) or run .ci/services/slurm.sh"
        )
    tool = " ".join((args[args.index("--") + 1 :] if "--" in args else args)[:2])  # runuser
    try:
        proc = subprocess.run(
            list(args), input=input_text, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        raise SlurmTimeout(f"{tool} got no answer from Slurm in {timeout:.0f} s") from None
    if proc.returncode != 0:
        message = proc.stderr.strip() or proc.stdout
        unknown = "timed out" in message.lower()  # sbatch's own MessageTimeout: no answer
        raise (SlurmTimeout if unknown else SlurmError)(f"{tool} failed: {message}")
    return proc.stdout


def parse_records(text: str) -> list[dict[str, str]]:
    """``scontrol -o`` output (one record per line of ``Key=Value`` pairs) as dicts."""
    records = []
    for line in text.splitlines():
        record: dict[str, str] = {}
        key = None
        for token in line.split():
            if "=" in token:
                key, _, value = token.partition("=")
                record[key] = value
            elif key:  # a value with spaces, e.g. OS=Linux 6.1 ...
                record[key] += " " + token
        if record:
            records.append(record)
    return records


def drain(node: str, reason: str) -> None:
    """Take ``node`` out of Slurm's service too (``scontrol update State=DRAIN``)."""
    run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason or 'xirang'}")


def resume(node: str) -> None:
    run("scontrol", "update", f"NodeName={node}", "State=RESUME")


def cancel(slurm_id: str, *flags: str) -> None:
    """``scancel`` (with ``flags``, e.g. a signal); a job that already ended is no error."""
    with contextlib.suppress(SlurmError):
        run("scancel", *flags, slurm_id)


def jobs() -> dict[str, dict[str, str]]:
    """Every job slurmctld holds (running, pending, and ended ones until ``MinJobAge``), by
    id, from one ``scontrol show job``: one question per poll however many jobs the pool
    tracks, so a stalled controller costs one timeout, not one per job."""
    records = parse_records(run("scontrol", "-o", "show", "job"))
    return {record["JobId"]: record for record in records if "JobId" in record}


def ended_at(record: Mapping[str, str]) -> float | None:
    """A job record's ``EndTime`` (the controller's local time) as epoch seconds; None while
    it runs."""
    try:
        return datetime.fromisoformat(record.get("EndTime", "")).timestamp()
    except ValueError:  # "Unknown", "None" or missing
        return None


def job_state(slurm_id: str) -> tuple[str, int]:
    """A job's state and exit code from ``scontrol show job`` (no accounting database needed);
    ``UNKNOWN`` for a job Slurm no longer knows (purged after ``MinJobAge``, or never made)."""
    try:
        text = run("scontrol", "-o", "show", "job", slurm_id)
    except SlurmError as exc:
        if "Invalid job id" in str(exc):
            return "UNKNOWN", -1
        raise
    records = parse_records(text)
    if not records:
        return "UNKNOWN", -1
    code = records[0].get("ExitCode", "0:0").split(":")[0]
    return records[0].get("JobState", "UNKNOWN"), int(code or 0)
