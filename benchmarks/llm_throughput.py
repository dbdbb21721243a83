"""xirang's training loop side by side with Hugging Face's Trainer and torchtitan, in one run.

The same Llama (shape and initial weights: the family's Hugging Face mapping gives the peers
xirang's own freshly initialised model), the same token batches in the same order, the same
optimizer settings (AdamW, betas, weight decay, gradient clipping, linear warm-up then cosine
decay to ``min_lr``), the same precision and the same threads, on this machine's CPU:

- xirang: its real ``Trainer`` on the worker ``assemble`` builds from the run's config, with its
  best settings here (``trainer.compile=true`` and the faster precision on this CPU, below);
- Hugging Face: ``LlamaForCausalLM`` loaded with ``from_pretrained`` and trained by ``Trainer``
  as its CPU guide says (``use_cpu``, ``bf16`` when the run is bf16, ``torch_compile``, its
  default fused AdamW), fed the batches through a Dataset;
- torchtitan 0.3.0: its Llama 3 model in a plain loop (autocast, each block and the loss
  compiled, fused AdamW), in an environment of its own that this script builds once (see
  ``--torchtitan-python``).

Each side runs in its own process (its peak RSS is its own), round after round with the order
rotated, and every side is timed over the same span: the same steps after the same warm-up
steps, which absorb compilation (compile time is excluded for all and reported apart). The loss
after training is the fp32 cross-entropy of the trained model on the same held-out batches.

The precision (``--precision auto``) is the faster of bf16 and fp32 by xirang's calibrated
matmul throughput on this CPU at the benchmark's threads: bf16 where the CPU has bf16 kernels
(AVX-512 BF16, AMX), fp32 on one without them, where torch's bf16 matmul runs 5 to 70 times
slower than fp32 (docs/training.md), so a bf16 run measures that fallback on every side.

    python benchmarks/llm_throughput.py --quick      # a smoke run: 1 round of 4 steps, batch 2
    python benchmarks/llm_throughput.py              # the figure: 3 rounds of 20 steps
    python benchmarks/llm_throughput.py --profile    # also the top operators of each side

Last line: ``tokens_per_s_vs_hf=<x> tokens_per_s_vs_torchtitan=<y> loss_vs_hf=<z>`` (xirang's
tokens/s over the peer's, the median of the rounds' ratios; z = |xirang loss - HF loss|; ``n/a``
where a side could not run).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from llm_peer import (
    PROFILE_STEPS,
    TORCHTITAN,
    TORCHTITAN_EXTRA,
    Stopwatch,
    eval_loss,
    load_plan,
    profiled,
)
from llm_peer import tokens as load_tokens

from xirang_core.errors import ConfigError, XirangError
from xirang_core.plugins import Registry, get_registry
from xirang_core.run import compose_config
from xirang_core.train.loop import Trainer
from xirang_core.train.worker import assemble, open_worker

PEER = Path(__file__).with_name("llm_peer.py")
TITAN_VENV = Path.home() / ".cache" / "xirang" / "bench-venvs" / TORCHTITAN.replace("==", "-")
EVAL_BATCHES = 4
LOG_EVERY = 10
QUICK = {"rounds": 1, "steps": 4, "warmup": 2, "batch": 2}


# --- preparing the shared inputs -------------------------------------------------------------


def overrides(args: argparse.Namespace, best: dict[str, str]) -> list[str]:
    """xirang's config for the run: the model, the batch shape, the steps, its best settings."""
    total = args.warmup + args.steps
    return [
        f"model={args.model}",
        *(f"model.{kv}" for kv in args.model_set),
        f"data.seq_len={args.seq}",
        f"trainer.global_batch={args.batch}",
        f"trainer.micro_batch={args.batch}",
        f"trainer.max_steps={total}",
        f"trainer.log_every={LOG_EVERY}",
        f"trainer.threads={args.threads}",
        "trainer.sample_tokens=0",
        f"optim.warmup_steps={max(1, total // 5)}",
        *(f"{k}={v}" for k, v in best.items()),
    ]


def best_settings(
    args: argparse.Namespace, registry: Registry, device: dict[str, Any]
) -> dict[str, str]:
    """xirang's fastest settings here, as overrides (every side runs the same precision and
    compilation); call with torch's threads set as the sides will run, and the run's
    ``device`` config, whose backend the worker trains on."""
    precision = args.precision
    if precision == "auto":
        calibration = registry.create("device", device).calibrate()
        precision = faster_precision(calibration.matmul_tflops)
    return {"trainer.precision": precision, "trainer.compile": str(args.compile).lower()}


def faster_precision(matmul_tflops: dict[str, float]) -> str:
    """bf16 or fp32, whichever dtype's calibrated matmul TFLOP/s is higher (fp32 on a tie or
    when bf16 was not measured): bf16 only pays where the CPU computes it natively."""
    bf16, fp32 = matmul_tflops.get("bfloat16", 0.0), matmul_tflops.get("float32", 0.0)
    return "bf16" if bf16 > fp32 else "fp32"


def prepare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Build xirang's worker once: its batches, held-out batches and initial weights (in
    Hugging Face's layout) become the peers' inputs; plan.json holds the shared settings."""
    from safetensors.torch import save_file

    config = compose_config(overrides(args, {}))  # precision and compile change neither
    registry = get_registry()
    with tempfile.TemporaryDirectory() as run_dir:
        ctx = open_worker(config, run_dir, registry)  # sets torch's threads
        parts = assemble(config, ctx, registry)
    best = best_settings(args, registry, config["device"])
    family = config["model"]["family"]
    interop = registry.spec("model", family).load_hf()
    if interop is None:
        raise ConfigError(
            f"model={args.model}: family {family!r} has no Hugging Face mapping, so the peers "
            "cannot build the same model; choose a Llama option (model=llama_small)"
        )
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    state = parts.model.state_dict()
    hf_config, tensors = interop.to_hf(settings, state)
    (work / "hf").mkdir(exist_ok=True)  # --work may name a folder of an earlier run
    (work / "hf" / "config.json").write_text(json.dumps(hf_config, indent=1))
    save_file({k: v.contiguous() for k, v in tensors.items()}, work / "hf" / "model.safetensors")
    np.save(work / "tokens.npy", batches(parts.train, range(1, config["trainer"]["max_steps"] + 1)))
    np.save(work / "eval.npy", batches(parts.val, range(EVAL_BATCHES)))
    plan = {
        "overrides": overrides(args, best),
        "warmup": args.warmup,
        "steps": args.steps,
        "batch": args.batch,
        "seq": args.seq,
        "precision": best["trainer.precision"],
        "compile": best["trainer.compile"] == "true",
        "threads": torch.get_num_threads(),
        "optim": config["optim"],
        "grad_clip": config["trainer"]["grad_clip"],
        "log_every": LOG_EVERY,
        "seed": config["seed"],
        "params": sum(p.numel() for p in parts.model.parameters()),
        "weights_sum": weights_sum(state),
    }
    (work / "plan.json").write_text(json.dumps(plan, indent=1))
    return plan


def batches(source, keys) -> np.ndarray:
    """xirang's (inputs, targets) windows as packed [batch, seq + 1] rows, for the peers."""
    rows = []
    for key in keys:
        x, y = source.get(key)
        rows.append(torch.cat([x, y[:, -1:]], dim=1).numpy())
    return np.stack(rows).astype(np.int64)


def weights_sum(state: dict[str, torch.Tensor]) -> float:
    return float(sum(t.double().abs().sum() for t in state.values()))


# --- the sides -------------------------------------------------------------------------------


def xirang_side(work: Path) -> dict[str, Any]:
    """xirang's own worker and ``Trainer.fit``, on the batches its data pipeline reads."""
    plan = load_plan(work)
    config = compose_config(plan["overrides"])
    registry = get_registry()
    with tempfile.TemporaryDirectory() as run_dir:
        ctx = open_worker(config, run_dir, registry)
        parts = assemble(config, ctx, registry)
        check_same_start(parts, plan, load_tokens(work))
        start = eval_loss(parts.model, load_tokens(work, "eval")[:1])
        watch = Stopwatch(plan)
        trainer = Trainer(
            parts.wrapped, parts.optimizer, parts.train, parts.settings, ctx, registry.hook, None
        )
        with profiled(watch, work, "xirang"):
            trainer.fit(on_step_end=lambda step: watch.step_end())
    parts.model.eval()
    loss = eval_loss(parts.model, load_tokens(work, "eval"))
    return watch.figures(loss, {"loss_start": start})


def check_same_start(parts, plan: dict[str, Any], tokens: torch.Tensor) -> None:
    """xirang rebuilt its model and batches from the config: they must be what the peers got."""
    if abs(weights_sum(parts.model.state_dict()) - plan["weights_sum"]) > 1e-6 * plan[
        "weights_sum"
    ] or not torch.equal(torch.from_numpy(batches(parts.train, [1]))[0], tokens[0]):
        raise RuntimeError("xirang's worker did not rebuild the weights and batches it prepared")


def hf_side(work: Path) -> dict[str, Any]:
    """``LlamaForCausalLM`` trained by Hugging Face's ``Trainer``, configured as its CPU guide
    recommends; the batches come through a Dataset in their order (no shuffling)."""
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    plan = load_plan(work)
    torch.set_num_threads(plan["threads"])
    model = AutoModelForCausalLM.from_pretrained(
        work / "hf", dtype=torch.float32, attn_implementation="sdpa"
    )
    watch, optim = Stopwatch(plan), plan["optim"]
    start = eval_loss(lambda x: model(input_ids=x).logits, load_tokens(work, "eval")[:1])

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            watch.step_end()

    args = TrainingArguments(
        output_dir=str(work / "hf-out"),
        use_cpu=True,
        bf16=plan["precision"] == "bf16",
        torch_compile=plan["compile"],
        max_steps=plan["warmup"] + plan["steps"],
        per_device_train_batch_size=plan["batch"],
        learning_rate=optim["lr"],
        lr_scheduler_type="cosine_warmup_with_min_lr",  # xirang's schedule, step for step
        lr_scheduler_kwargs={"min_lr": optim["min_lr"]},
        warmup_steps=optim["warmup_steps"],
        adam_beta1=optim["beta1"],
        adam_beta2=optim["beta2"],
        weight_decay=optim["weight_decay"],
        max_grad_norm=plan["grad_clip"],
        logging_steps=plan["log_every"],
        save_strategy="no",
        report_to="none",
        seed=plan["seed"],
        dataloader_pin_memory=False,  # no accelerator to copy to
        remove_unused_columns=False,  # keep shift_labels: the targets of all seq positions
    )
    trainer = Trainer(model=model, args=args, train_dataset=Rows(work), callbacks=[StepClock()])
    with profiled(watch, work, "hf"):
        trainer.train()
    model.eval()
    loss = eval_loss(lambda x: model(input_ids=x).logits, load_tokens(work, "eval"))
    return watch.figures(loss, {"loss_start": start})


class Rows(torch.utils.data.IterableDataset):
    """The prepared batches row by row, in order. ``shift_labels`` are the next tokens of every
    position, as xirang and torchtitan train (``labels`` alone would drop the last one)."""

    def __init__(self, work: Path) -> None:
        self.tokens = load_tokens(work)

    def __iter__(self):
        for batch in self.tokens:
            for row in batch:
                yield {"input_ids": row[:-1], "labels": row[1:], "shift_labels": row[1:]}


SIDES = {"xirang": xirang_side, "hf": hf_side}


# --- torchtitan's environment ----------------------------------------------------------------


def titan_python(given: str | None, build: bool) -> tuple[str | None, str]:
    """The interpreter of torchtitan's side, or None and why it is not measured. Its venv
    (built once) shares this environment's torch through a .pth file, so both run one torch."""
    if given:
        if not Path(given).is_file():
            raise ConfigError(f"--torchtitan-python {given!r} is not a file; give a python path")
        return given, ""
    python = TITAN_VENV / "bin" / "python"
    if not python.is_file() and build:
        why = build_titan_venv()
        if why:
            return None, why
    if not python.is_file():
        return None, f"no torchtitan environment at {TITAN_VENV} (run without --no-build)"
    probe = subprocess.run(
        [str(python), "-c", "import torchtitan.models.llama3"], capture_output=True, text=True
    )
    if probe.returncode:
        return None, f"{TORCHTITAN} does not import: {tail(probe.stderr)}"
    return str(python), ""


def build_titan_venv() -> str:
    """Create the venv and pip install torchtitan into it; '' or what failed."""
    print(f"building {TORCHTITAN}'s environment in {TITAN_VENV} (once)")
    venv.create(TITAN_VENV, with_pip=True)
    torch_site = Path(importlib.util.find_spec("torch").origin).parent.parent
    site = next((TITAN_VENV / "lib").glob("python*/site-packages"))
    (site / "xirang-torch.pth").write_text(f"{torch_site}\n")
    pip = [str(TITAN_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    done = subprocess.run([*pip, TORCHTITAN, *TORCHTITAN_EXTRA], capture_output=True, text=True)
    if done.returncode:
        shutil.rmtree(TITAN_VENV, ignore_errors=True)
        return f"pip install {TORCHTITAN} failed: {tail(done.stderr)}"
    return ""


# --- the run ---------------------------------------------------------------------------------


@dataclass
class Side:
    """One contender: its command, its rounds' figures, or why it is not measured."""

    name: str
    command: list[str] | None
    why: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)

    def run(self, work: Path, keep: bool = True) -> None:
        """One round in a fresh process; ``keep=False`` for a round that is not measured."""
        if self.command is None:
            return
        done = subprocess.run([*self.command, str(work)], capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        try:
            figures = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            self.command, self.why = None, f"exit {done.returncode}: {tail(done.stderr)}"
            return
        if keep:
            self.runs.append(figures)

    def figures(self, plan: dict[str, Any]) -> dict[str, float] | None:
        if not self.runs:
            return None
        tokens_per_step = plan["batch"] * plan["seq"]
        rounds = [tokens_per_step * len(r["step_s"]) / sum(r["step_s"]) for r in self.runs]
        return {
            "tokens_per_s": statistics.median(rounds),
            "rounds": rounds,
            "step_p50_ms": 1e3 * statistics.median(s for r in self.runs for s in r["step_s"]),
            "warmup_s": statistics.median(r["warmup_s"] for r in self.runs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in self.runs),
            "loss": statistics.median(r["loss"] for r in self.runs),
            "loss_start": statistics.median(r["loss_start"] for r in self.runs),
        }


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def main() -> None:
    args = parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="xirang-llm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    plan = prepare(args, work)
    me = [sys.executable, __file__, "--side"]
    python, why = (
        (None, "--no-torchtitan")
        if args.no_torchtitan
        else titan_python(args.torchtitan_python, not args.no_build)
    )
    sides = [
        Side("xirang", [*me, "xirang"]),
        Side("hf", [*me, "hf"]),
        Side("torchtitan", [python, str(PEER)] if python else None, why),
    ]
    for round_ in range(args.rounds):  # rotate who goes first, so drift hits all alike
        for side in sides[round_ % 3 :] + sides[: round_ % 3]:
            side.run(work)
    report(sides, plan)
    if args.profile:
        profile(sides, work)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(last_line(sides, plan))


def profile(sides: list[Side], work: Path) -> None:
    """One more round under torch.profiler; each side's top operators by self CPU time."""
    plan = load_plan(work)
    (work / "plan.json").write_text(json.dumps({**plan, "profile": True}))
    for side in sides:
        side.run(work, keep=False)
        path = work / f"profile-{side.name}.txt"
        if path.is_file():
            print(f"\n{side.name}: top operators over {PROFILE_STEPS} steps after the warm-up")
            print(path.read_text())


def report(sides: list[Side], plan: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=(
            f"Llama {plan['params'] / 1e6:.1f}M params, batch {plan['batch']} x seq "
            f"{plan['seq']}, {plan['precision']}, compile {'on' if plan['compile'] else 'off'}, "
            f"{plan['threads']} threads: {len(sides[0].runs)} rounds of {plan['steps']} steps "
            f"after {plan['warmup']} warm-up steps (compile time excluded, shown as warm-up)"
        )
    )
    columns = (
        "side",
        "tokens/s",
        "by round",
        "step p50 ms",
        "warm-up s",
        "peak RSS MB",
        "start loss",
        "loss",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "side" else "right")
    for side in sides:
        f = side.figures(plan)
        if f is None:
            table.add_row(side.name, *["n/a"] * 6, side.why[:100])
            continue
        table.add_row(
            side.name,
            f"{f['tokens_per_s']:,.0f}",
            " ".join(f"{r:,.0f}" for r in f["rounds"]),
            f"{f['step_p50_ms']:,.0f}",
            f"{f['warmup_s']:.1f}",
            f"{f['peak_rss_mb']:,.0f}",
            f"{f['loss_start']:.4f}",
            f"{f['loss']:.4f}",
        )
    Console(width=160).print(table)
    for side in sides:
        if side.why:
            print(f"{side.name} not measured: {side.why}")
    print(
        f"loss: fp32 cross-entropy on {EVAL_BATCHES} held-out batches after training; start "
        "loss: the untrained model on the first of them (equal: the same model and weights)"
    )


def last_line(sides: list[Side], plan: dict[str, Any]) -> str:
    figures = {s.name: s.figures(plan) for s in sides}
    mine = figures["xirang"]

    def ratio(peer: str) -> str:
        """The median over rounds of the ratio within a round: the sides of one round ran
        minutes apart, those of different rounds further, so load drift cancels best there."""
        theirs = figures[peer]
        if not mine or not theirs:
            return "n/a"
        pairs = zip(mine["rounds"], theirs["rounds"], strict=False)
        return f"{statistics.median(a / b for a, b in pairs):.3f}"

    hf = figures["hf"]
    loss = f"{abs(mine['loss'] - hf['loss']):.4f}" if mine and hf else "n/a"
    return (
        f"tokens_per_s_vs_hf={ratio('hf')} tokens_per_s_vs_torchtitan={ratio('torchtitan')} "
        f"loss_vs_hf={loss}"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="measured steps per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compile)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--model", default="llama_small", help="xirang's model option")
    parser.add_argument(
        "--model-set", action="append", default=[], metavar="KEY=VALUE",
        help="change the model's shape, e.g. --model-set n_layers=4 (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--precision", default="auto", choices=("auto", "bf16", "fp32"),
        help="auto: the faster of the two on this CPU (xirang's calibration)",
    )  # fmt: skip
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 = all cores")
    parser.add_argument("--torchtitan-python", help="python of an environment with torchtitan")
    parser.add_argument("--no-torchtitan", action="store_true")
    parser.add_argument("--no-build", action="store_true", help="do not build torchtitan's venv")
    parser.add_argument("--profile", action="store_true", help="top operators of every side")
    parser.add_argument("--work", help="keep the prepared inputs and profiles in this folder")
    if parser.parse_args().quick:  # quick's values as defaults: flags given still win
        parser.set_defaults(**QUICK)
    return parser.parse_args()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--side":  # one side, in its own process
        print(json.dumps(SIDES[sys.argv[2]](Path(sys.argv[3]))))
        sys.exit(0)
    try:
        main()
    except XirangError as err:  # bad input: one message, no traceback
        sys.exit(f"xirang error: {err}")
