"""Prove a GPU machine in one command: does xirang detect, measure and train on it?

    python benchmarks/gpu_check.py

Needs nothing but the project and a CUDA build of torch, and takes at most about 8 minutes on one
GPU. In order: detection, inventory and health (the cuda device backend); calibration (bf16
matmul TFLOP/s against the device's datasheet peak, memory bandwidth); the default run on the GPU
in bf16 with ``trainer.compile=true``, with NVML power read during it; FSDP2 and DDP on one
device (and over NCCL on two when the machine has them); an async checkpoint saved and restored
onto the GPU, compared bit for bit; the bf16 MFU of a 1B Llama through the throughput
benchmark's pieces (``benchmarks/llm_throughput.py``); Colossal-AI's LowLevelZero and Gemini for
a few steps when colossalai is installed. Each part runs in a process of its own, so one that
fails (or leaves GPU memory behind) does not take the others with it.

On a machine without a usable GPU it reports detection, inventory and health, says which parts
need a GPU, and prints the last line with ``n/a`` figures. Last line::

    gpu_mfu_bf16=<x> calib_vs_datasheet=<y> ckpt_restore_bitwise=<yes|no> fsdp=<ok|fail>
    ddp=<ok|fail> power_w=<p> compile=<ok|fail>

(on one line; MFU against the datasheet's dense bf16 peak, PaLM's 6N + 12·L·H·Q·T FLOPs).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: the parts that need a GPU, in the order they run: the headline figures first, so slower
#: parts cannot starve them of the time budget
GPU_PARTS = ("calibration", "mfu", "checkpoint", "default_run", "ddp", "fsdp", "colossalai")
MFU_SHAPE = {"model": "llama3_1b", "seq": 1024, "batch": 8, "warmup": 4, "steps": 12}
BUDGET_S = 480  # the whole check, on one GPU
PART_LIMIT_S = 240  # one part at most
#: ``--rehearse``: every part on the CPU, small, to check this script where no GPU is
REHEARSAL_SHAPE = {"model": "llama_tiny", "seq": 64, "batch": 2, "warmup": 1, "steps": 2}
DEVICE = "cuda"  # "cpu" under --rehearse


# --- the parent: detection, then each part in its own process ---------------------------------


def main() -> None:
    args = parse_args()
    if args.rehearse:
        global DEVICE
        DEVICE = "cpu"
    if args.part:
        print(json.dumps(PARTS[args.part]()))  # one part, in this child process
        return
    with scratch(args.wheels):
        check(args)


@contextlib.contextmanager
def scratch(wheels: Path | None) -> Iterator[None]:
    """The folders a check writes besides ``--out``: the site ``--wheels`` installs into and a
    fresh ``XIRANG_HOME`` (runs share one cache, so the BPE is trained once); removed after."""
    made = []
    if wheels:
        made.append(Path(tempfile.mkdtemp(prefix="xirang-gpu-site-")))
        install_wheels(wheels, made[-1])
    if "XIRANG_HOME" not in os.environ:
        made.append(Path(tempfile.mkdtemp(prefix="xirang-gpu-check-")))
        os.environ["XIRANG_HOME"] = str(made[-1])
    try:
        yield
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def check(args: argparse.Namespace) -> None:
    """Detect the device, run each part in its own process, print and keep the figures."""
    out = prepare_out(args.out)
    results: dict[str, dict[str, Any]] = {}
    found = {**detect(), "preflight": preflight()}
    show("detection", found)
    if not (found["usable"] or args.rehearse):
        print(f"needs a GPU (not run here): {', '.join(GPU_PARTS)}")
        print(f"reason: {found['reason']}")
    else:
        results = run_parts(args.rehearse, out)
    line = last_line(results)
    if out:
        summary = {"detection": found, **results, "last_line": line}
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(line)


def run_parts(rehearse: bool, out: Path | None) -> dict[str, dict[str, Any]]:
    """Each GPU part in its own process, in order, within the budget; power sampled meanwhile."""
    results: dict[str, dict[str, Any]] = {}
    slower = 4 if rehearse else 1  # two shared cores are slow
    budget, power = BUDGET_S * slower, PowerSampler()
    deadline = time.monotonic() + budget
    for part in GPU_PARTS:
        left = min(PART_LIMIT_S * slower, deadline - time.monotonic())
        if left < 10:
            results[part] = {"ok": False, "error": f"not run: the {budget} s budget is spent"}
        else:
            with power.during(part in ("default_run", "mfu")):
                results[part] = run_part(part, left, out)
        show(part, results[part])
    results["power"] = power.summary()
    show("power", results["power"])
    return results


def install_wheels(wheels: Path, site: Path) -> None:
    """Install the wheels ``benchmarks/gpu_wheels.py`` fetched (no index: the machine may be
    air-gapped) into ``site``, first on the path of this process and of every part's."""
    found = sorted(str(path) for path in wheels.glob("*.whl"))
    if not found:
        sys.exit(f"xirang error: --wheels {wheels}: no .whl files there; make them with "
                 "python benchmarks/gpu_wheels.py on a machine with network")  # fmt: skip
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    command = [*pip, "--no-compile", "--upgrade", "--target", str(site), *found]
    if subprocess.run(command).returncode != 0:
        sys.exit(f"xirang error: --wheels {wheels}: pip could not install them (above)")
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH", "")])
    )
    print(f"== wheels: {len(found)} installed into {site}", flush=True)


def prepare_out(given: Path | None) -> Path | None:
    """``--out``, else ``$OUT`` when set: summary.json and parts/<part>.log go there."""
    out = given or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out:
        (out / "parts").mkdir(parents=True, exist_ok=True)
    return out


def preflight() -> dict[str, Any]:
    """What the parts need besides torch: the driver's own view (nvidia-smi, with power.draw),
    a C compiler (inductor and triton build their launchers with one), the visible devices."""
    import torch

    import xirang_core

    smi = shutil.which("nvidia-smi")
    found: dict[str, Any] = {
        "xirang": str(Path(xirang_core.__file__).parent.parent),  # the installed wheels'?
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "c_compiler": next(
            filter(None, map(shutil.which, (os.environ.get("CC") or "cc", "gcc"))), None
        ),
        "nvidia_smi": smi,
    }
    if smi:
        fields = "name,driver_version,memory.total,power.draw,temperature.gpu"
        query = [smi, f"--query-gpu={fields}", "--format=csv,noheader"]
        done = subprocess.run(query, capture_output=True, text=True, timeout=60)
        found["nvidia_smi_query"] = (done.stdout or done.stderr).strip().splitlines()
    return found


def detect() -> dict[str, Any]:
    """The cuda backend's own answer: present and why, inventory, health (no GPU needed)."""
    from xirang_core.plugins import get_registry

    backend = get_registry().load("device", "cuda")()
    present, reason = backend.detect()
    report: dict[str, Any] = {"usable": bool(present), "reason": reason}
    for key, probe in (("inventory", backend.inventory), ("health", backend.health)):
        try:
            report[key] = [asdict(item) for item in probe()]
        except Exception as exc:  # a probe that fails is a finding, not the end of the check
            report[key] = f"{type(exc).__name__}: {exc}"
    return report


def run_part(part: str, timeout: float, out: Path | None = None) -> dict[str, Any]:
    """``part`` in a child process: its JSON, or what went wrong; its whole output goes to
    ``out/parts/<part>.log`` when ``out`` is given."""
    command = [sys.executable, __file__, "--part", part, *(["--rehearse"] if rehearsing() else [])]
    started = time.perf_counter()
    # a session of its own: on a timeout its training runs go too, not only the part's process
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        keep_log(out, part, *child.communicate())
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    keep_log(out, part, stdout, stderr)
    seconds = round(time.perf_counter() - started, 1)
    lines = stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return {"ok": False, "error": " | ".join(tail), "seconds": seconds}
    return {**json.loads(lines[-1]), "seconds": seconds}


def keep_log(out: Path | None, part: str, stdout: str | None, stderr: str | None) -> None:
    """The part's whole output (its training runs' logs included) in ``out/parts``."""
    if out:
        text = f"{stdout or ''}\n--- stderr ---\n{stderr or ''}"
        (out / "parts" / f"{part}.log").write_text(text)


class PowerSampler:
    """NVML power (the cuda backend's reading), summed over the devices, every half second
    while a training part runs."""

    def __init__(self) -> None:
        from xirang_core.plugins import get_registry

        self.backend = get_registry().load("device", "cuda")()
        self.samples: list[float] = []

    def during(self, sample: bool) -> Any:
        sampler = self

        class Span:
            def __enter__(self) -> None:
                self.stop = threading.Event()
                self.thread = threading.Thread(target=self.loop, daemon=True)
                if sample:
                    self.thread.start()

            def loop(self) -> None:
                while not self.stop.wait(0.5):
                    watts = sampler.backend.power_watts()
                    if watts:
                        sampler.samples.append(sum(watts.values()))

            def __exit__(self, *exc: Any) -> None:
                self.stop.set()
                if sample:
                    self.thread.join()

        return Span()

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"ok": False, "error": "no NVML power reading"}
        mean = sum(self.samples) / len(self.samples)
        return {"ok": True, "mean_w": round(mean, 1), "max_w": round(max(self.samples), 1)}


def show(name: str, result: dict[str, Any]) -> None:
    print(f"== {name}: {json.dumps(result, default=str)}", flush=True)


def last_line(results: dict[str, dict[str, Any]]) -> str:
    def figure(part: str, key: str, digits: int = 3) -> str:
        value = results.get(part, {}).get(key)
        return "n/a" if value is None else f"{value:.{digits}f}"

    def status(part: str) -> str:
        return "n/a" if part not in results else ("ok" if results[part].get("ok") else "fail")

    bitwise = results.get("checkpoint", {}).get("bitwise")
    return (
        f"gpu_mfu_bf16={figure('mfu', 'mfu')} "
        f"calib_vs_datasheet={figure('calibration', 'vs_datasheet')} "
        f"ckpt_restore_bitwise={'n/a' if bitwise is None else ('yes' if bitwise else 'no')} "
        f"fsdp={status('fsdp')} ddp={status('ddp')} power_w={figure('power', 'mean_w', 1)} "
        f"compile={status('default_run')}"
    )


# --- the parts (each runs in a child process) -------------------------------------------------


def rehearsing() -> bool:
    return DEVICE == "cpu"


def steps(gpu: int) -> str:
    """``trainer.max_steps`` for a run: ``gpu`` of them, 3 in a rehearsal."""
    return f"trainer.max_steps={3 if rehearsing() else gpu}"


def device_name() -> str:
    import torch

    return "cpu" if rehearsing() else torch.cuda.get_device_name(0)


def datasheet(model: str) -> tuple[float, float] | None:
    """(dense bf16 TFLOP/s, memory GB/s) of the device named ``model``, if xirang's table has
    it (imported here: the check runs before the wheels it installs are importable)."""
    from xirang_core.devices.datasheet import datasheet as sheet

    return sheet(model)


def calibration() -> dict[str, Any]:
    from xirang_core.plugins import get_registry

    measured = get_registry().load("device", DEVICE)().calibrate(refresh=True)
    bf16 = measured.matmul_tflops.get("bfloat16")
    name = device_name()
    sheet = datasheet(name)
    result = {
        "ok": bf16 is not None,
        "device": name,
        "bf16_tflops": bf16,
        "memory_gbps": measured.memory_bandwidth_gbps,
        "all_tflops": dict(measured.matmul_tflops),
    }
    if sheet and bf16:
        result.update(
            datasheet_bf16_tflops=sheet[0],
            datasheet_memory_gbps=sheet[1],
            vs_datasheet=bf16 / sheet[0],
            memory_vs_datasheet=measured.memory_bandwidth_gbps / sheet[1],
        )
    return result


def xirang_run(*overrides: str) -> dict[str, Any]:
    """``python -m xirang device=cuda ...``: whether it trained, and its last logged record."""
    command = [sys.executable, "-m", "xirang", f"device={DEVICE}", "trainer.sample_tokens=0"]
    with tempfile.TemporaryDirectory(prefix="xirang-gpu-runs-") as runs:  # not ./outputs
        env = {**os.environ, "XIRANG_RUNS": runs}
        done = subprocess.run(
            [*command, *overrides], capture_output=True, text=True, env=env, cwd=ROOT
        )
        # into the part's log
        sys.stderr.write(f"--- {' '.join(overrides)}\n{done.stdout}{done.stderr}\n")
        records = [
            json.loads(line)
            for path in Path(runs).rglob("metrics.jsonl")
            for line in path.read_text().splitlines()
            if line.strip()
        ]
    result: dict[str, Any] = {"ok": done.returncode == 0, "overrides": list(overrides)}
    if records:
        last = records[-1]
        result["last"] = {k: last[k] for k in ("step", "loss", "tokens_per_s", "mfu") if k in last}
        result["compile_s"] = sum(r.get("compile_s", 0.0) for r in records)
    if done.returncode != 0:
        result["error"] = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
    return result


def default_run() -> dict[str, Any]:
    """The default run in bf16 with compile: ok once it trained and torch.compile compiled."""
    run = xirang_run("trainer.precision=bf16", "trainer.compile=true", steps(60))
    return {**run, "ok": run["ok"] and run.get("compile_s", 0.0) > 0}


def strategy_runs(name: str) -> dict[str, Any]:
    """``parallel=<name>`` on one device, and over NCCL on two where the machine has them."""
    import torch

    base = [f"parallel={name}", "trainer.precision=bf16", steps(20)]
    runs = {"world_1": xirang_run(*base)}
    if not rehearsing() and torch.cuda.device_count() >= 2:
        runs["nccl_2"] = xirang_run(*base, "trainer.nproc=2")
    ok = all(r["ok"] for r in runs.values())
    if name == "fsdp":  # on one device too, FSDP2 must shard for real: DTensor parameters
        runs["parameter_type"] = {"ok": True, "types": wrapped_parameter_types()}
        ok = ok and runs["parameter_type"]["types"] == ["DTensor"]
    return {"ok": ok, **runs}


def wrapped_parameter_types() -> list[str]:
    """The parameter types of ``parallel=fsdp``'s model on one rank, as a run wraps it."""
    import torch.distributed as dist

    from xirang_core.config import compose
    from xirang_core.plugins import get_registry
    from xirang_core.run import resolve_runtime
    from xirang_core.train.worker import assemble, open_worker

    config = compose([f"device={DEVICE}", "parallel=fsdp", "tokenizer=bytes"])
    registry = get_registry()
    config = resolve_runtime(config, registry)
    with tempfile.TemporaryDirectory(prefix="xirang-gpu-fsdp-") as run_dir:
        ctx = open_worker(config, run_dir, registry)
        try:
            model = assemble(config, ctx, registry).model
            return sorted({type(p).__name__ for p in model.parameters()})
        finally:
            dist.destroy_process_group()


def checkpoint() -> dict[str, Any]:
    """An async save of a trained model and its optimizer, restored into a fresh one on the
    GPU: every tensor must come back bit for bit, on the GPU."""
    import torch

    from xirang_core.checkpoint.manager import CheckpointManager
    from xirang_core.plugins import get_registry
    from xirang_core.specs import WorkerContext

    device = torch.device("cpu") if rehearsing() else torch.device("cuda", 0)
    settings = {"vocab_size": 256, "dim": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2}
    settings.update(ffn_dim=256, max_seq_len=64)
    family = get_registry().load("model", "llama")

    def build(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(seed)
        model = family.from_config(dict(settings)).to(device)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)

    config = {"checkpoint": {"interval": 0, "async_save": True}, "optim": {}}
    with tempfile.TemporaryDirectory(prefix="xirang-gpu-ckpt-") as run_dir:
        ctx = WorkerContext(0, 0, 1, device, run_dir, config)
        model, optim = build(0)
        for _ in range(2):
            idx = torch.randint(0, 256, (4, 33), device=device)
            model(idx[:, :-1], idx[:, 1:]).backward()
            optim.step()
            optim.zero_grad()
        saver = CheckpointManager.from_config(config, ctx, model, optim)
        started = time.perf_counter()
        saver.save(2)
        stall = time.perf_counter() - started
        saver.wait(raise_errors=True)
        fresh, fresh_optim = build(1)
        CheckpointManager.from_config(config, ctx, fresh, fresh_optim).restore()
        want, got = model.state_dict(), fresh.state_dict()
        same = all(torch.equal(want[k], got[k]) for k in want)
        on_device = all(t.device.type == device.type for t in got.values())
        moments = optim.state_dict()["state"], fresh_optim.state_dict()["state"]
        same_optim = all(
            torch.equal(a, moments[1][i][k])
            for i, state in moments[0].items()
            for k, a in state.items()
            if torch.is_tensor(a)
        )
    bitwise = same and same_optim and on_device
    restored_on = device.type if on_device else "not all on it"
    return {
        "ok": bitwise,
        "bitwise": bitwise,
        "restored_on": restored_on,
        "stall_s": round(stall, 4),
    }


def mfu() -> dict[str, Any]:
    """A 1B Llama in bf16 with compile through the throughput benchmark's own config and
    stopwatch; tokens/s x FLOPs per token over the datasheet's dense bf16 peak."""
    import statistics

    from llm_peer import Stopwatch
    from llm_throughput import best_settings, overrides

    from xirang_core.plugins import get_registry
    from xirang_core.run import compose_config
    from xirang_core.train.loop import Trainer
    from xirang_core.train.worker import assemble, open_worker

    chosen = REHEARSAL_SHAPE if rehearsing() else MFU_SHAPE
    shape = argparse.Namespace(**chosen, model_set=[], threads=0, precision="bf16")
    shape.compile = not rehearsing()
    registry = get_registry()
    run = overrides(shape, best_settings(shape, registry, {"name": DEVICE}))
    config = compose_config([*run, f"device={DEVICE}", "tokenizer=bytes"])
    with tempfile.TemporaryDirectory() as run_dir:
        ctx = open_worker(config, run_dir, registry)
        parts = assemble(config, ctx, registry)
        watch = Stopwatch({"warmup": shape.warmup})
        trainer = Trainer(
            parts.wrapped, parts.optimizer, parts.train, parts.settings, ctx, registry.hook, None
        )
        trainer.fit(on_step_end=lambda step: watch.step_end())
    step_s = statistics.median(watch.figures(0.0)["step_s"])
    tokens_per_s = shape.batch * shape.seq / step_s
    sheet = datasheet(device_name())
    achieved = tokens_per_s * parts.settings.flops_per_token
    return {
        "ok": sheet is not None,
        "tokens_per_s": round(tokens_per_s),
        "achieved_tflops": round(achieved / 1e12, 1),
        "mfu": achieved / (sheet[0] * 1e12) if sheet else None,
        "params": sum(p.numel() for p in parts.model.parameters()),
        "shape": chosen,
    }


def colossalai() -> dict[str, Any]:
    if importlib.util.find_spec("colossalai") is None:
        return {"ok": True, "skipped": "colossalai is not installed"}
    runs = {
        plugin: xirang_run("parallel=colossalai", f"parallel.plugin={plugin}", steps(5))
        for plugin in ("low_level_zero", "gemini")
    }
    return {"ok": all(r["ok"] for r in runs.values()), **runs}


PARTS = {
    "calibration": calibration,
    "default_run": default_run,
    "fsdp": lambda: strategy_runs("fsdp"),
    "ddp": lambda: strategy_runs("ddp"),
    "checkpoint": checkpoint,
    "mfu": mfu,
    "colossalai": colossalai,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="run every part on the CPU, small, to check this script (figures mean nothing)",
    )
    parser.add_argument(
        "--wheels",
        type=Path,
        help="install these wheels first, without an index (from benchmarks/gpu_wheels.py)",
    )
    parser.add_argument(
        "--out", type=Path, help="write summary.json and each part's log here (default: $OUT)"
    )
    return parser.parse_args()


if __name__ == "__main__":
    main()
