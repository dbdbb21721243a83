"""Every command README.md and docs/*.md show works as written (issue 20: the docs are tests).

The commands run in reading order, as a newcomer would type them, in one working folder with a
fresh ``XIRANG_HOME``. A command fails its test on a non-zero exit (a zero one where the docs
show ``xirang error: ...``), on a traceback, or when the output the docs show under it no longer
matches (numbers, ``<placeholders>`` and ``...`` match anything).

A command not in ``TABLE`` runs exactly as written. ``TABLE`` (keyed by the command's text as
``collect`` reads it) says what else to do: ``As`` spells out placeholders and ``a|b``
alternatives, ``Slow`` leaves a long one to ``XIRANG_DOCS_SLOW=1``, ``Skip`` names the service,
hardware or network it needs. A ``<!-- docs-test: skip (why) -->`` line before a block skips it
in the markdown itself. An entry whose command left the docs fails, so the table stays true.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Prepared, require_moto_server
from tests.docs.collect import REPO, DocCommand, collect
from tests.plugins.xirang_slurm.conftest import slurm  # noqa: F401  (the real Slurm, for Slurm)

SLOW_ENV = "XIRANG_DOCS_SLOW"  # =1 also runs the commands marked Slow
TIMEOUT_S = 600  # generous: a loaded CI machine; the commands run take seconds idle


@dataclass(frozen=True)
class As:
    """Run these instead: placeholders given values ({run}: the newest run directory in the
    working folder, {step}: its newest committed checkpoint), each alternative spelled out."""

    commands: tuple[str, ...]


@dataclass(frozen=True)
class Slow:
    why: str


@dataclass(frozen=True)
class Skip:
    why: str


#: what makes a documented training run short (each replaces a value the command gives)
SHORT_RUN = ("trainer.max_steps=2", "trainer.sample_tokens=0")


@dataclass(frozen=True)
class Short:
    """A training command, run by ``test_documented_runs.py`` as written but with the docs
    test's own ``overrides`` in place of any value it gives those keys: its choices (model,
    strategy, workers, trackers, sweep) run for two steps rather than the minutes of the 300 it
    trains. ``commands`` spell out placeholders (shortened too; ``hf-model`` is a Hugging Face
    folder exported from the quick run)."""

    commands: tuple[str, ...] = ()
    overrides: tuple[str, ...] = SHORT_RUN


def shortened(text: str, overrides: tuple[str, ...] = SHORT_RUN) -> str:
    """``text`` with each of ``overrides`` in place of the value it gives that key (appended
    where it gives none)."""
    for override in overrides:
        key = override.split("=", 1)[0]
        given = re.compile(rf"(?<=\s){re.escape(key)}=\S+")
        text = given.sub(override, text) if given.search(text) else f"{text} {override}"
    return text


@dataclass(frozen=True)
class Pool:
    """Run with the working folder's pool service up: the ``pool`` fixture starts it with the
    documented ``xirang pool serve --cluster cluster.yaml`` (on a free loopback port, which
    XIRANG_POOL_URL names) the first time an entry needs it. ``serves``: the entry is that
    command, checked by what it printed; ``commands`` spell out alternatives ({job}: a job
    submitted just before, to cancel); empty runs the command as written; ``slow`` leaves it
    to XIRANG_DOCS_SLOW=1."""

    commands: tuple[str, ...] = ()
    serves: bool = False
    slow: str = ""


@dataclass(frozen=True)
class Service:
    """A service the docs start (it runs until stopped), run with the pool up on a free loopback
    port (the docs' ``--port`` replaced, or one added): it must print a line holding ``ready``
    and answer each of ``paths`` with 200, sent the project's exported token, or the one in
    ``token_file`` (in the working folder) where the service serves another pool's state. A
    command the docs end with ``&`` stays up for the commands after it; the others stop once
    checked."""

    ready: str
    paths: tuple[str, ...] = ()
    token_file: str = ""
    #: the docs' ``postgresql://...`` store is a fresh database on a throwaway PostgreSQL server
    #: (tests/pool/postgres.py: skipped without PostgreSQL locally, a failure in CI)
    postgres: bool = False
    #: a pool server of its own, on a copy of the docs' pool state (``XIRANG_HOME`` apart): the
    #: docs restart their pool this way, and an SQLite store has one server at a time
    own_state: bool = False


@dataclass(frozen=True)
class Slurm:
    """Run on the real Slurm ``.ci/services/slurm.sh`` starts (skipped without one locally, a
    failure in CI): ``commands`` spell the docs' sweep out for a one-node cluster of a few CPUs,
    each sweep point a run of a few steps rather than the default 300."""

    commands: tuple[str, ...]


@dataclass(frozen=True)
class S3:
    """Run with a real S3 endpoint up, as the docs' ``s3://bucket/...`` assume: moto_server on
    loopback with a bucket ``bucket``, named by the standard AWS environment (skipped without
    moto_server locally, a failure in CI); ``commands`` spell out placeholders."""

    commands: tuple[str, ...] = ()


@dataclass(frozen=True)
class Export:
    """``export NAME=<token>``: NAME is set, for the commands after it, to the newest token a
    pool command printed (``token: ...``), or to the content of ``file`` (in the working
    folder) for ``export NAME=$(cat FILE)``."""

    name: str
    file: str = ""


#: the docs' corpus (``xirang data prepare ./corpus /data/corpus``), for a run that reads it
_PREPARED = "xirang data prepare ./corpus data/corpus && "
_GPU = "needs NVIDIA GPUs"
_NET = "installs from the network"
#: what makes each point of a documented Slurm sweep short (the sweep itself is as written)
_SHORT_SWEEP = " " + " ".join(SHORT_RUN)
#: the docs' training run from S3, and a pool job (each shown twice)
_FROM_S3 = "python -m xirang storage=s3_cache data=snapshot data.uri=s3://bucket/corpus"
_POOLED = "python -m xirang scheduler=pool project=nlp pool.priority=high pool.cards=8"
#: two trials of a few steps, each evaluated (the pruning sweeps' objective), for an Optuna sweep
_TRIALS = ("trainer.max_steps=6", "trainer.eval_every=3", "hydra.sweeper.n_trials=2")
_SYNOPSIS = "a synopsis of the options, not a command; the commands below it run"
_PLAN = "measures this host for each plan: minutes on two CPU cores"
_BENCH = "a benchmark: minutes; it prints its figures as its last line"

TABLE: dict[str, As | Slow | Skip | Short | Pool | Service | Slurm | Export] = {
    # README.md
    'pip install -e ".[dev]" torch==2.13.0': Skip(
        "CI runs it verbatim: test_ci_runs_the_readmes_install_and_test_commands checks .ci/run"
    ),
    "pip install -e . torch==2.13.0": Skip(
        "an install (network); tests/test_lean_install.py trains with only what it installs"
    ),
    "python -m xirang": Short(),
    "python -m xirang model=gpt_small trainer.max_steps=50 optim.lr=1e-3": Short(),
    "python -m xirang trainer.nproc=2 parallel=ddp": Short(),
    "python -m xirang -m optim.lr=1e-3,3e-3 trainer.max_steps=20": Short(),
    "python -m xirang model=hf model.config=DIR": Short(
        ("python -m xirang model=hf model.config=hf-model",)
    ),
    "python -m xirang model=hf model.pretrained=DIR": Short(
        ("python -m xirang model=hf model.pretrained=hf-model",)
    ),
    "xirang ckpt export --format hf RUN [OUT]": As(("xirang ckpt export --format hf {run} hf",)),
    "python -m xirang model=llama_tiny model.pretrained=OUT": Short(
        (
            "xirang ckpt export --format hf {run} OUT && python -m xirang model=llama_tiny "
            "model.pretrained=OUT",
        )
    ),
    "python -m xirang trainer.precision=bf16": Short(),
    "python -m xirang trainer.compile=true": Short(),
    "python -m xirang trainer.eval_every=50": Short(),
    "python -m xirang trainer.nonfinite=skip": Short(),
    "python -m xirang trainer.global_batch=16 trainer.grad_accum=4": Short(),
    "python -m xirang trainer.eval_every=25 trainer.eval_batches=16": Short(),
    "python -m xirang schedule=wsd schedule.decay_fraction=0.1 optim.warmup_steps=30": Short(),
    "xirang data prepare ./corpus /data/corpus": As(("xirang data prepare ./corpus data/corpus",)),
    "xirang data snapshots /data/corpus": As(("xirang data snapshots data/corpus",)),
    "xirang data sync /data/corpus s3://bucket/corpus": S3(
        ("xirang data sync data/corpus s3://bucket/corpus",)
    ),
    "xirang data verify s3://bucket/corpus": S3(),
    "python -m xirang data=snapshot data.uri=/data/corpus [data.snapshot=<id>]": Short(
        (_PREPARED + "python -m xirang data=snapshot data.uri=data/corpus",)
    ),
    _FROM_S3: S3((shortened(_FROM_S3),)),
    "python -m xirang trainer.nproc=4 parallel=hybrid parallel.tp=2 "
    "parallel.recompute=full": Short(),
    "python -m xirang trainer.nproc=4 parallel=auto": Short(),
    "xirang plan model=gpt_tiny devices=4": Slow(_PLAN),
    "xirang plan model=llama3_8b cluster=dgx_h100 --verify": Slow(
        "wraps two 8B plans on 8 fake ranks and steps each: minutes on two CPU cores"
    ),
    "xirang plan model=gpt_125m cluster=dgx_h100 nodes=4 [--json]": As(
        (
            "xirang plan model=gpt_125m cluster=dgx_h100 nodes=4",
            "xirang plan model=gpt_125m cluster=dgx_h100 nodes=4 --json",
        )
    ),
    "python -m xirang trainer.nproc=4 parallel=ddp comm=powersgd comm.rank=4": Short(),
    "xirang bench comm --workers 1,2,4": Slow("times each option on 1, 2 and 4 workers"),
    "xirang pool simulate --trace philly.csv --cluster gavel_mixed.yaml --limit 10000 "
    "--policy fifo,priority,hetero,gavel --mixing off,balanced --load 0.5,1,1.5,2 "
    "--plot pool_jct_load.png": Skip(
        "the whole Philly trace and Gavel's throughputs, which xirang does not ship; "
        "32 replays of 10,000 jobs"
    ),
    "python -m xirang trainer.nproc=2 parallel=ddp trainer.max_restarts=3 "
    "checkpoint.interval=100": Short(),
    "xirang ckpt ls|verify|export RUN": As(
        ("xirang ckpt ls {run}", "xirang ckpt verify {run}", "xirang ckpt export {run}")
    ),
    "xirang ckpt keep RUN STEP": As(("xirang ckpt keep {run} {step}",)),
    "xirang ckpt export --format hf RUN OUT": As(("xirang ckpt export --format hf {run} hf2",)),
    "xirang drill all": Slow("four drills, each a run killed, corrupted or failed and resumed"),
    "xirang pool serve --cluster cluster.yaml": Pool(serves=True),
    "xirang pool quota nlp --guaranteed 64 --max-priority high": Pool(),
    "export XIRANG_POOL_TOKEN=<nlp token>": Export("XIRANG_POOL_TOKEN"),
    _POOLED: Pool((shortened(_POOLED),)),
    "xirang pool status | queue | jobs | cancel 12": Pool(
        ("xirang pool status", "xirang pool queue", "xirang pool jobs", "xirang pool cancel {job}")
    ),
    "python -m xirang -m hydra/launcher=submitit_slurm hydra.launcher.partition=debug "
    "optim.lr=1e-3,3e-3": Slurm(
        (
            "python -m xirang -m hydra/launcher=submitit_slurm hydra.launcher.partition=debug "
            "optim.lr=1e-3,3e-3" + _SHORT_SWEEP,
        )
    ),
    "xirang cost report --by team|project|device --since 7d [--csv out.csv]": As(
        (
            "xirang cost report --by team --since 7d",
            "xirang cost report --by project --since 7d",
            "xirang cost report --by device --since 7d --csv out.csv",
        )
    ),
    "xirang console": Service("xirang console: http://", ("/login", "/metrics")),
    "xirang pool serve --prices book.yaml": Service("xirang pool: http://", own_state=True),
    "xirang plugins [--json]": As(("xirang plugins", "xirang plugins --json")),
    "pytest": Skip("the test suite itself"),
    # docs/checkpoint.md
    "xirang ckpt ls RUN [--json]": As(("xirang ckpt ls {run} --json",)),
    "xirang ckpt verify RUN [--step N]": As(("xirang ckpt verify {run} --step {step}",)),
    "xirang ckpt export RUN [OUT] [--step N]": As(
        ("xirang ckpt export {run} model.safetensors --step {step}",)
    ),
    "xirang ckpt keep RUN N [--undo]": As(("xirang ckpt keep {run} {step} --undo",)),
    "xirang ckpt export --format dcp RUN [OUT]": As(("xirang ckpt export --format dcp {run} dcp",)),
    "xirang ckpt export --format torchtitan RUN [OUT]": As(
        ("xirang ckpt export --format torchtitan {run} titan",)
    ),
    "xirang ckpt import FOLDER RUN [--step N] [--model K=V ...] [--model-only]": As(
        (
            "xirang ckpt export --format dcp {run} dcp",
            "xirang ckpt import dcp imported",
            "xirang ckpt import dcp weights --model-only",
        )
    ),
    "xirang drill kill|corrupt|fail_save|storage|all [--times 3] [--seed 0] [overrides...]": Skip(
        _SYNOPSIS
    ),
    # docs/comm.md
    "xirang bench comm": Slow("times every option on 1 and 2 workers"),
    "xirang bench comm --workers 1,2 --options gloo,fp16 --steps 10": Slow("about a minute"),
    "xirang bench comm --cluster cluster.yaml --predict-workers 16,64,256": Slow(
        "times every option here first; tests/comm/test_bench_command.py runs it with a cluster "
        "file and --predict-workers"
    ),
    # docs/console.md
    "xirang pool serve --state pool.db --cluster cluster.yaml &": Service("xirang pool: http://"),
    "xirang console --state pool.db --prices book.yaml --port 8080": Service(
        "xirang console: http://", ("/login", "/metrics"), "pool.db.operator-token"
    ),
    # docs/cost.md
    "python -m xirang cost=pricebook cost.prices.cuda=3.2 cost.capacity_class=guaranteed": Short(),
    "python -m xirang cost=energy_aware cost.watts.cuda=700 cost.price_per_kwh=0.25": Short(),
    # docs/data.md
    "xirang data prepare SRC DST [--format auto|files|lines|jsonl|parquet|hf] [--field text]": Skip(
        _SYNOPSIS
    ),
    "xirang data snapshots DST": As(("xirang data snapshots data/corpus",)),
    "xirang data sync SRC DST [--snapshot ID]": As(("xirang data sync data/corpus data/copy",)),
    "xirang data verify DST [--snapshot ID]": As(("xirang data verify data/copy",)),
    "python -m xirang data=snapshot data.uri=/data/corpus [data.snapshot=ID]": Short(
        (_PREPARED + "python -m xirang data=snapshot data.uri=data/corpus",)
    ),
    "xirang data tokenize DST --tokenizer NAME [--snapshot ID] [--workers 2] "
    "[--set tokenizer.KEY=V]": Skip(_SYNOPSIS),
    "python benchmarks/data_epoch.py [--gb 1.5] [--cache-mb 300] [--shard-mb 4]": Skip(_BENCH),
    "python benchmarks/data_epoch.py --train [--gb 1.5] [--steps 300]": Skip(_BENCH),
    "python -m xirang tokenizer=bpe tokenizer.vocab_size=4096": Short(),
    "python -m xirang tokenizer=bytes": Short(),
    "python -m xirang tokenizer=hf tokenizer.path=/models/llama3": Short(
        ("python -m xirang tokenizer=hf tokenizer.path=hf-model",)
    ),
    "python benchmarks/data_loading.py [--tokens 50000000] [--runs 3] [--workers 2] "
    "[--phases warm,cold,resume]": Skip(
        "a benchmark that builds its peers' environment from the network; minutes"
    ),
    "python benchmarks/data_loading.py --tokens 200000 --runs 1 --peers none": Skip(
        "run by tests/benchmarks/test_data_loading.py"
    ),
    # docs/devices.md
    'pip install -e ".[cuda]"': Skip(_NET),
    'pip install -e ".[rocm]"': Skip(_NET),
    'pip install -e ".[ascend]"': Skip(_NET),
    "xirang devices --calibrate": Slow("measures every device again"),
    "xirang devices --calibrate --json > devices.json": Slow("measures every device again"),
    "python -m xirang device=cuda trainer.max_steps=2 trainer.sample_tokens=0": Skip(_GPU),
    "python -m xirang device=cuda trainer.nproc=2 parallel=ddp trainer.max_steps=2": Skip(_GPU),
    # docs/huggingface.md
    "python -m xirang model=hf model.config=path/to/dir": Short(
        ("python -m xirang model=hf model.config=hf-model",)
    ),
    "python -m xirang model=hf model.config=path/to/config.json model.vocab_size=256 "
    "tokenizer=bytes": Short(
        (
            "python -m xirang model=hf model.config=hf-model/config.json model.vocab_size=256 "
            "tokenizer=bytes",
        )
    ),
    "python -m xirang model=hf model.pretrained=path/to/dir": Short(
        ("python -m xirang model=hf model.pretrained=hf-model",)
    ),
    "python -m xirang model=llama_tiny model.pretrained=path/to/dir": Short(
        ("python -m xirang model=llama_tiny model.pretrained=hf-model",)
    ),
    "python -m xirang model=hf model.config=dir parallel=fsdp trainer.nproc=2": Short(
        ("python -m xirang model=hf model.config=hf-model parallel=fsdp trainer.nproc=2",)
    ),
    "xirang ckpt export --format hf outputs/2026-12-01/10-00-00-abc123 my-model": As(
        ("xirang ckpt export --format hf {run} my-model",)
    ),
    # docs/parallel.md
    "python -m xirang parallel=ddp trainer.nproc=2 'scheduler.worker_quota=[1.0,1.0]' "
    "parallel.balance=adaptive parallel.balance_every=2 '+drill={slow:[[4,1,0.05]]}' "
    "model=gpt_tiny tokenizer=bytes trainer.global_batch=8 trainer.micro_batch=1 "
    "trainer.max_steps=16 trainer.sample_tokens=0": Short(overrides=("trainer.max_steps=6",)),
    "python benchmarks/hetero.py [--model llama_small] [--quota 0.4] [--steps 12] "
    "[--global-batch 16]": Skip("needs the cgroup v1 CPU controller as root, and minutes"),
    "python benchmarks/hetero.py --slurm": Skip(
        "the two-node Slurm test bed and the cgroup v1 CPU controller as root, and minutes; "
        "tests/benchmarks/test_hetero.py composes its runs"
    ),
    "torchrun --nproc-per-node=2 -m xirang parallel=ddp": Short(),
    "python -m xirang trainer.nproc=4 parallel=fsdp": Short(),
    "python -m xirang trainer.nproc=4 parallel=fsdp parallel.zero=2": Short(),
    "python -m xirang trainer.nproc=2 parallel=tp": Short(),
    "python -m xirang trainer.nproc=2 parallel=sp": Short(),
    "python -m xirang trainer.nproc=2 parallel=pp parallel.schedule=gpipe trainer.micro_batch=2": (
        Short()
    ),
    "python -m xirang trainer.nproc=4 parallel=hybrid parallel.tp=2": Short(),
    "python -m xirang trainer.nproc=8 parallel=hybrid parallel.tp=2 parallel.pp=2 "
    "parallel.recompute=full": Short(),
    "python -m xirang trainer.nproc=4 parallel=auto parallel.smoke=true": Short(),
    "xirang plan model=gpt_small devices=4 --smoke": Slow(_PLAN + ", then smoke-runs the best"),
    "pip install --no-deps colossalai==0.5.0": Skip(_NET),
    "pip install peft==0.13.2 transformers==4.51.3 'huggingface-hub<1.0' 'tokenizers<0.22' "
    "galore-torch bitsandbytes einops": Skip(_NET),
    # docs/pool.md
    "xirang pool serve --cluster cluster.yaml --store postgresql://pool@db.example/pool": Service(
        "xirang pool: http://", postgres=True
    ),
    "export XIRANG_POOL_OPERATOR_TOKEN=$(cat ~/.cache/xirang/pool.db.operator-token)": Export(
        "XIRANG_POOL_OPERATOR_TOKEN", file="home/pool.db.operator-token"
    ),
    "xirang pool quota nlp --guaranteed 64 --borrow-limit 64 --team research": Pool(),
    "xirang pool quota nlp --max-priority high": Pool(),
    "xirang pool quota nlp --max-jobs 500 --max-payload-bytes 4194304 --rate 20 --burst 40": Pool(),
    # the docs' account does not exist here, and a fresh host has no login account (uid
    # UID_MIN..UID_MAX) to name instead: the same option, clearing the project's account
    "xirang pool quota nlp --run-as nlp-jobs": Pool(("xirang pool quota nlp --run-as ''",)),
    "xirang pool status | queue | jobs --state running | cancel 12": Pool(
        (
            "xirang pool status",
            "xirang pool queue",
            "xirang pool jobs --state running",
            "xirang pool cancel {job}",
        )
    ),
    "xirang pool jobs --json": Pool(),
    "xirang pool history 12": Pool(("xirang pool history {job}",)),
    'xirang pool drain gpu-0007 --reason "ECC errors"': Pool(),
    "python -m xirang -m hydra/launcher=submitit_slurm hydra.launcher.partition=debug "
    "hydra.launcher.cpus_per_task=4 hydra.launcher.timeout_min=60 optim.lr=1e-3,3e-3": Slurm(
        (  # one CPU a task: the test bed's node has two
            "python -m xirang -m hydra/launcher=submitit_slurm hydra.launcher.partition=debug "
            "hydra.launcher.cpus_per_task=1 hydra.launcher.timeout_min=60 optim.lr=1e-3,3e-3"
            + _SHORT_SWEEP,
        )
    ),
    # docs/tracking.md (each tracker, the profiler and both sweepers have their own tests)
    "python -m xirang 'tracker=[tensorboard,mlflow,wandb]' trainer.max_steps=20": Short(),
    "python -m xirang tracker=mlflow tracker.mlflow.experiment=lr-study trainer.max_steps=20": (
        Short()
    ),
    "python -m xirang 'tracker=[tensorboard,mlflow]' 'trainer.profile.steps=[5,7]' "
    "trainer.max_steps=20": Short(overrides=("trainer.max_steps=7",)),
    "python -m xirang 'trainer.profile.steps=[5,7]' trainer.max_steps=10": Short(
        overrides=("trainer.max_steps=7",)
    ),
    "python -m xirang -m hydra/sweeper=optuna hydra.sweeper.n_trials=8 trainer.max_steps=30 "
    "'optim.lr=tag(log, interval(1e-4, 1e-1))'": Short(overrides=(*SHORT_RUN, *_TRIALS[2:])),
    "python -m xirang -m hydra/sweeper=optuna_pruning hydra.sweeper.n_trials=8 model=gpt_tiny "
    "tokenizer=bytes trainer.max_steps=30 trainer.eval_every=5 trainer.sample_tokens=0 "
    "optim.warmup_steps=2 'optim.lr=tag(log, interval(1e-4, 1e-1))'": Short(overrides=_TRIALS),
    "python -m xirang -m hydra/launcher=submitit_slurm hydra.launcher.cpus_per_task=1 "
    "hydra/sweeper=optuna_pruning hydra.sweeper.n_trials=4 hydra.sweeper.n_jobs=2 model=gpt_tiny "
    "tokenizer=bytes trainer.max_steps=20 trainer.eval_every=5 trainer.sample_tokens=0 "
    "'optim.lr=tag(log, interval(1e-4, 1e-1))'": Slurm(
        (
            shortened(
                "python -m xirang -m hydra/launcher=submitit_slurm hydra.launcher.cpus_per_task=1 "
                "hydra/sweeper=optuna_pruning hydra.sweeper.n_trials=4 hydra.sweeper.n_jobs=2 "
                "model=gpt_tiny tokenizer=bytes trainer.max_steps=20 trainer.eval_every=5 "
                "trainer.sample_tokens=0 'optim.lr=tag(log, interval(1e-4, 1e-1))'",
                _TRIALS,
            ),
        )
    ),
    # docs/training.md
    "python -m xirang model=llama_small": Short(),
    "python -m xirang model=gpt_tiny tokenizer=bytes": Short(),
    "python -m xirang trainer.precision=fp16": Short(),
    "python -m xirang checkpoint.interval=100": Short(),
    "python -m xirang checkpoint.resume=never": Short(),
    "xirang ckpt ls RUN": As(("xirang ckpt ls {run}",)),
    "python -m xirang trainer.threads=1": Short(),
    # docs/benchmarks/training.md
    "python benchmarks/llm_throughput.py --quick": Slow(_BENCH),
    "python benchmarks/llm_throughput.py": Slow(_BENCH),
    "python benchmarks/llm_throughput.py --profile": Slow(_BENCH),
}

#: what the working folder holds before the first command: a small corpus to prepare, and
#: the repository's files the docs name by relative path
_LINKED = ("benchmarks", "xirang_core", "xirang_service", "examples")
#: the quick run the ``{run}`` placeholders read (no documented command is quick enough)
_SETUP_RUN = ("trainer.max_steps=3", "trainer.log_every=1", "trainer.sample_tokens=8")

#: what the quick run printed (its summary), kept in the working folder
_SETUP_PRINTED = "quick-run.txt"

COMMANDS = collect()


def _id(command: DocCommand) -> str:
    return f"{command.where} {command.text[:60]}"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, prepared_home: Prepared) -> Path:
    return newcomers_folder(tmp_path_factory, prepared_home)


def newcomers_folder(tmp_path_factory: pytest.TempPathFactory, prepared_home: Prepared) -> Path:
    """A newcomer's folder: a fresh XIRANG_HOME, a small corpus, one quick run. The home starts
    as that first run leaves it (the embedded corpus, the BPE tokenizer, the calibration, copied
    from the session's): what the docs' commands read, without preparing it all again."""
    work = tmp_path_factory.mktemp("docs")
    prepared_home.seed(work / "home")
    for name in _LINKED:
        (work / name).symlink_to(REPO / name)
    corpus = work / "corpus"
    corpus.mkdir()
    for i, path in enumerate(sorted((REPO / "xirang_core").rglob("*.py"))[:40]):
        shutil.copy(path, corpus / f"{i:03d}_{path.name}")
    (work / "book.yaml").write_text(_price_book())
    done = _shell(f"python -m xirang {' '.join(_SETUP_RUN)}", work)
    assert done.returncode == 0, done.stdout[-3000:]
    (work / _SETUP_PRINTED).write_text(done.stdout)
    return work


def _price_book() -> str:
    """The price book docs/cost.md shows (the ``book.yaml`` the commands name)."""
    text = (REPO / "docs" / "cost.md").read_text()
    return text.split("```yaml\n", 1)[1].split("```", 1)[0]


#: what the commands so far put in the environment (the pool's URL, an exported token)
_EXPORTED: dict[str, str] = {}
#: the pool service the README starts first; the pool fixture starts it
_POOL_SERVE = "xirang pool serve --cluster cluster.yaml"
#: the cluster file the pool commands name: two 8-GPU nodes, one of them the one docs drain
_CLUSTER = """nodes:
  - {name: gpu-0007, type: cuda, devices: 8}
  - {name: gpu-0008, type: cuda, devices: 8}
"""


def _env(work: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "XIRANG_HOME": str(work / "home"),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "COLUMNS": "80",  # a newcomer's terminal: what the docs show is what fits it
        **_EXPORTED,
    }


@dataclass
class PoolService:
    process: subprocess.Popen
    printed: str  # what ``xirang pool serve`` printed as it started
    token: str = ""  # the newest token a pool command printed (``export`` sets it)


def _free_port() -> int:
    """A free loopback port (several test sessions may share a machine)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _on_port(command: str, port: int) -> str:
    """``command`` with its ``--port`` (or an added one) set to ``port``, and no trailing ``&``."""
    command = command.removesuffix("&").strip()
    if re.search(r"--port \d+", command):
        return re.sub(r"--port \d+", f"--port {port}", command)
    return f"{command} --port {port}"


def _start(
    command: str, work: Path, ready: str, home: Path | None = None
) -> tuple[subprocess.Popen, str]:
    """A service started in ``work`` (with ``XIRANG_HOME`` at ``home``, if given), once it
    printed a line holding ``ready``, with what it printed so far."""
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command}"],
        cwd=work,
        env={**_env(work), **({"XIRANG_HOME": str(home)} if home else {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    printed = ""
    while ready not in printed:
        line = process.stdout.readline()
        assert line, f"`{command}` exited {process.wait()}:\n{printed}"
        printed += line
    return process, printed


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def pool(workspace: Path) -> Iterator[PoolService]:
    """The documented ``xirang pool serve --cluster cluster.yaml``, on a free loopback port,
    until the module's commands are done."""
    (workspace / "cluster.yaml").write_text(_CLUSTER)
    port = _free_port()
    # "operator token": its last start-up line on a fresh state; it serves from now on
    process, printed = _start(_on_port(_POOL_SERVE, port), workspace, "operator token")
    _EXPORTED["XIRANG_POOL_URL"] = f"http://127.0.0.1:{port}"
    yield PoolService(process, printed)
    for service in _BACKGROUND:  # what the docs started with `&`
        _stop(service)
    _BACKGROUND.clear()
    _stop(process)
    _EXPORTED.clear()


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A real S3 endpoint with the docs' bucket, for the module's S3 commands."""
    from xirang.storage.local_s3 import local_s3

    require_moto_server()
    with local_s3("bucket", "docs-secret") as url:
        yield url


#: services the docs start in the background (``... &``), stopped with the pool
_BACKGROUND: list[subprocess.Popen] = []


def _serve(entry: Service, command: DocCommand, request: pytest.FixtureRequest) -> None:
    """A documented service (see :class:`Service`), with the pool up."""
    text = _on_port(command.text, _free_port())
    if not entry.postgres:
        return _check_service(entry, command, text, request)
    from tests.pool import postgres

    with postgres.cluster() as server:
        url = postgres.fresh_database(server, "docs")
        _check_service(entry, command, re.sub(r"postgresql://\S+", url, text), request)


def _check_service(
    entry: Service, command: DocCommand, text: str, request: pytest.FixtureRequest
) -> None:
    """``text`` (the command as run) started, answering and printing what the docs show."""
    pooled: PoolService = request.getfixturevalue("pool")
    work: Path = request.getfixturevalue("workspace")
    port = int(text.rsplit("--port ", 1)[1].split()[0])
    home = _copied_home(work) if entry.own_state else None
    process, printed = _start(text, work, entry.ready, home)
    token = (work / entry.token_file).read_text().strip() if entry.token_file else pooled.token
    try:
        for path in entry.paths:
            code, body = _get(f"http://127.0.0.1:{port}{path}", token)
            assert code == 200, f"{command.where}: GET {path} answered {code}: {body[:500]}"
        assert process.poll() is None, f"{command.where}: it stopped:\n{printed}"
        missing = mismatch(command.output, printed, command.figures)
        assert not missing, f"the docs show {missing!r}; it printed {printed}"
    finally:
        if command.text.endswith("&") and process.poll() is None:
            _BACKGROUND.append(process)
        else:
            _stop(process)


def _copied_home(work: Path) -> Path:
    """A copy of the docs' ``XIRANG_HOME``, each SQLite store copied through SQLite's backup
    (the running pool's write-ahead log included), its serving lock left behind."""
    import shutil
    import sqlite3
    from contextlib import closing

    home, copy = work / "home", work / "home-own"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns("*.db*"))
    for store in home.rglob("*.db"):
        target = copy / store.relative_to(home)
        with closing(sqlite3.connect(store)) as source, closing(sqlite3.connect(target)) as to:
            source.backup(to)
    return copy


def _get(url: str, token: str) -> tuple[int, str]:
    """(status, body) of a GET with ``token`` as its bearer."""
    import urllib.error
    import urllib.request

    ask = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(ask, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def _pool_job(work: Path) -> str:
    """A job of project nlp (the docs' ``cancel 12``): submitted now, with its token."""
    from xirang_service.pool.client import PoolClient

    env = _env(work)
    client = PoolClient(env["XIRANG_POOL_URL"], env.get("XIRANG_POOL_TOKEN", ""))
    return str(client.submit(project="nlp", cards=1)["id"])


def _run_pooled(entry: Pool, command: DocCommand, request: pytest.FixtureRequest) -> None:
    """A pool command with the service up (see :class:`Pool`)."""
    if entry.slow and os.environ.get(SLOW_ENV) != "1":
        pytest.skip(f"slow ({entry.slow}); {SLOW_ENV}=1 runs it")
    service: PoolService = request.getfixturevalue("pool")
    if entry.serves:
        assert service.process.poll() is None, service.printed
        missing = mismatch(command.output, service.printed)
        assert not missing, f"the docs show {missing!r}; it printed {service.printed}"
        return
    for text in entry.commands or (command.text,):
        work = request.getfixturevalue("workspace")
        done = _shell(text.replace("{job}", _pool_job(work)) if "{job}" in text else text, work)
        printed = done.stdout + done.stderr
        service.token = [service.token, *re.findall(r"^token: (\S+)$", printed, re.M)][-1]
        what = f"{command.where}: `{text}` printed:\n{printed[-3000:]}"
        assert done.returncode == 0 and "Traceback" not in printed, what
        missing = mismatch(command.output, printed, command.figures)
        assert not missing, f"the docs show {missing!r}; {what}"


def _export(entry: Export, request: pytest.FixtureRequest) -> None:
    service: PoolService = request.getfixturevalue("pool")
    if entry.file:
        _EXPORTED[entry.name] = (request.getfixturevalue("workspace") / entry.file).read_text()
        return
    assert service.token, f"no pool command before `export {entry.name}` printed a token"
    _EXPORTED[entry.name] = service.token


def _shell(command: str, work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=work,
        env=_env(work),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _newest_run(work: Path) -> str:
    runs = sorted(
        p.parent for p in (work / "outputs").rglob("config.yaml") if "hydra" not in str(p)
    )
    assert runs, "no run directory yet"
    return str(runs[-1].relative_to(work))


_NUMBER = r"[-+]?\d[\d.,]*(?:e[-+]?\d+)?"


def _newest_step(run: Path) -> str:
    """The newest checkpoint step whose save committed (its manifest is written last)."""
    steps = sorted(
        int(m.parent.name.split("-")[1]) for m in run.glob("checkpoints/*/manifest.json")
    )
    assert steps, f"no committed checkpoint in {run}"
    return str(steps[-1])


def _pattern(shown: str, figures: bool) -> re.Pattern[str]:
    """A line the docs show as a pattern: <placeholders> and ... match anything, and so do
    numbers unless the block's figures are exact."""
    parts = re.split(rf"(\.\.\.|…|<[^>]+>|{_NUMBER})", shown.strip())
    regex = ""
    for i, part in enumerate(parts):
        if i % 2 == 0 or (figures and re.fullmatch(_NUMBER, part)):
            regex += re.escape(part)
        else:
            regex += _NUMBER if re.fullmatch(_NUMBER, part) else ".*"
    return re.compile(regex)


def mismatch(shown: tuple[str, ...], printed: str, figures: bool = False) -> str:
    """The first shown line that the printed output lacks (in order), or ''."""
    lines = printed.splitlines()
    at = 0
    for line in (s for s in shown if s.strip()):
        pattern = _pattern(line, figures)
        hit = next((i for i in range(at, len(lines)) if pattern.search(lines[i])), None)
        if hit is None:
            return line
        at = hit + 1
    return ""


#: the commands this module runs in reading order (``Short`` ones run apart, in
#: ``test_documented_runs.py``, on another test worker)
IN_ORDER = [c for c in COMMANDS if not isinstance(TABLE.get(c.text), Short)]


@pytest.mark.slow
@pytest.mark.parametrize("command", IN_ORDER, ids=_id)
def test_a_documented_command_works_as_written(
    command: DocCommand, request: pytest.FixtureRequest
) -> None:
    entry = TABLE.get(command.text)
    if command.skip or isinstance(entry, Skip):
        pytest.skip(command.skip or entry.why)
    if isinstance(entry, Slow) and os.environ.get(SLOW_ENV) != "1":
        pytest.skip(f"slow ({entry.why}); {SLOW_ENV}=1 runs it")
    if isinstance(entry, Pool):
        return _run_pooled(entry, command, request)
    if isinstance(entry, Export):
        return _export(entry, request)
    if isinstance(entry, Service):
        return _serve(entry, command, request)
    if isinstance(entry, Slurm):
        request.getfixturevalue("slurm")
    if isinstance(entry, S3):
        request.getfixturevalue("s3")
    texts = entry.commands if isinstance(entry, As | Slurm | S3) else (command.text,)
    check_commands(command, texts or (command.text,), request.getfixturevalue("workspace"))


def check_commands(command: DocCommand, texts: tuple[str, ...], workspace: Path) -> str:
    """Each of ``texts`` (``command`` as run) exits as the docs show (an error where they show
    ``xirang error:``), with no traceback and the output lines the docs show; returns what the
    last one printed."""
    expect_error = bool(command.output) and command.output[0].startswith("xirang error:")
    printed = ""
    for text in texts:
        if "{run}" in text:
            run = _newest_run(workspace)
            text = text.replace("{run}", run).replace("{step}", _newest_step(workspace / run))
        done = _shell(text, workspace)
        printed = done.stdout + done.stderr
        what = f"{command.where}: `{text}` printed:\n{printed[-3000:]}"
        assert (done.returncode != 0) == expect_error, f"exit {done.returncode}; {what}"
        assert "Traceback (most recent call last)" not in printed, what
        missing = mismatch(command.output, printed, command.figures)
        assert not missing, f"the docs show {missing!r}; {what}"
    return printed


def test_ci_runs_the_readmes_install_and_test_commands() -> None:
    """.ci/run installs and tests with the README's own lines, so what CI proves is what a
    newcomer types (and the install need not run again here)."""
    readme = [c.text for c in COMMANDS if c.file == "README.md"]
    ci = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    users, tests = [c for c in readme if c.startswith("pip install -e")]  # set-up, then Test's
    assert "dev" not in users, f"the users' set-up `{users}` pulls in the development extras"
    assert tests == 'pip install -e ".[dev]" torch==2.13.0'
    assert readme.index("pytest") == readme.index(tests) + 1  # the test set-up, then pytest
    assert [ln for ln in ci if ln.startswith("pip install")] == [tests], ".ci/run differs"
    assert "pytest" in ci


def test_the_readme_names_every_extra_and_the_docs_install_them_as_it_does() -> None:
    """Issue 53: README's list of extras lacked ``lora``, and docs/huggingface.md said ``pip
    install 'xirang[hf]'`` where the README installs from a clone (``pip install -e ".[hf]"``).
    ``dev`` is Test's set-up; ``web`` is ``pool`` under its earlier name."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    readme = (REPO / "README.md").read_text()
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z0-9]+)`", setup))
    assert set(extras["optional-dependencies"]) - {"dev", "web"} - named == set()
    for page in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))):
        text = " ".join(page.read_text().split())  # an inline command may wrap
        assert not re.findall(r"pip install '?xirang\[", text), page.name


def test_the_docs_show_one_form_of_export_that_runs() -> None:
    """Issue 53: docs mixed ``export RUN OUT`` and ``export RUN -o OUT``; every export the
    docs show names its output as the argument after RUN (``-o`` still works)."""
    exports = [
        line.split("#")[0]
        for page in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
        for line in page.read_text().splitlines()
        if line.strip().startswith("xirang ckpt export")
    ]
    assert len(exports) >= 7
    for line in exports:
        assert not re.search(r"(^|[\s\[])(-o|--output)\b", line), line


def _summary_rows(lines: list[str]) -> list[tuple[str, str]]:
    """(label, value) of each row of a run summary table, in order; a value the table wrapped
    over several lines is joined again."""
    rows: list[tuple[str, str]] = []
    for cells in (ln.strip().split("│") for ln in lines if ln.strip().startswith("│")):
        label, value = cells[1].strip(), cells[2].strip()
        if label:
            rows.append((label, value))
        elif rows:
            rows[-1] = (rows[-1][0], f"{rows[-1][1]} {value}")
    return rows


#: what the MFU row adds when the host was busy each time the peak was measured (the README's
#: run was quiet; a loaded test host is not)
_BUSY_PEAK = " on a busy host (no quiet measurement yet)"


def _shape(label: str, value: str) -> str:
    """A summary row's value with what differs between two runs of one command left out: its
    figures, the run's own folder, the host's processor, a peak measured on a busy host."""
    if label == "run directory":  # an absolute path, shortened (…) where it is long
        return re.sub(r"^/\S+$", "RUN", value)
    value = re.sub(r"(worker\(s\), ).*", r"\1DEVICE", value.replace(_BUSY_PEAK, ""))
    return re.sub(_NUMBER, "N", value)


@pytest.mark.slow
def test_the_readmes_default_run_summary_is_shaped_as_a_run_prints_it(workspace: Path) -> None:
    """README's "How the default run ends" block is a real run's output: its rows are the
    ones the summary prints today, in order, each worded as printed, with the sample after
    them (the figures are that 300-step run's; the quick run here has other figures and the
    same shape). Issue 53: the MFU row changed wording (its peak's source and load) while the
    README kept the old one, and the check of the row labels alone passed."""
    readme = (REPO / "README.md").read_text().splitlines()
    start = next(i for i, ln in enumerate(readme) if ln.strip() == "run summary")
    shown = readme[start : next(i for i in range(start, len(readme)) if not readme[i].strip())]
    printed = (workspace / _SETUP_PRINTED).read_text()
    shapes = [
        [(k, _shape(k, v)) for k, v in _summary_rows(lines)]
        for lines in (shown, printed.splitlines())
    ]
    assert shapes[0] == shapes[1], printed
    assert "sample from the trained model:" in [ln.strip() for ln in shown]
    assert "sample from the trained model:" in printed


def test_every_table_entry_is_a_documented_command() -> None:
    """An entry whose command left (or changed in) the docs is stale: drop or rename it."""
    shown = {c.text for c in COMMANDS}
    assert not sorted(set(TABLE) - shown)


def test_the_output_patterns_match_what_they_should() -> None:
    shown = ("xirang error: comm=nccl serves cuda devices, not cpu. Use comm=auto or ...",)
    assert not mismatch(
        shown, "xirang error: comm=nccl serves cuda devices, not cpu. Use comm=auto or comm=x"
    )
    assert mismatch(shown, "xirang error: comm=nccl is fine")
    assert not mismatch(("last: a=<x> b=1.5",), "noise\nlast: a=0.25 b=17")
    assert mismatch(("jct 1.47 h",), "jct 1.48 h", figures=True)
    assert not mismatch(("jct 1.47 h",), "jct 1.47 h", figures=True)
