"""Balanced data parallelism: each rank runs its own number of a step's micro-batches.

``parallel.balance=uniform`` (the default) splits a step's micro-batches evenly, as DDP, FSDP
and torchtitan do, and every fast rank waits for the slowest at each step's gradient sync.
``calibrated`` and ``adaptive`` give rank ``r`` a share ``c_r`` of the step's ``M =
global_batch / micro_batch`` micro-batches in proportion to its measured speed (each at least
one), so every rank reaches the sync at about the same time: the step then takes about
``M / sum(speeds)``, not ``M / W / min(speed)``.

What stays exact (REFERENCE §8): the step's rows, their order and the data position are the
uniform split's; only which rank reads which micro-batch changes. Micro-batches are dealt round
by round (:meth:`Shares.slot`), so equal shares read exactly the rows the uniform split reads,
and a resume on any mix or worker count continues the same trajectory. Every micro-batch's
loss is a mean over its tokens scaled by ``W / M`` (not ``1 / accum``): the sum over a rank's
micro-batches, averaged over the ``W`` ranks by DDP's all-reduce or FSDP's reduce-scatter, is
the mean over all ``M`` micro-batches, the uniform split's update.

Speed is measured, not declared: a rank's compute time is the forward and backward of its
micro-batches that run without a collective (under ``no_sync``), plus the last micro-batch's
forward scaled by the forward-to-whole ratio those show; the last backward, which waits for
the gradient sync, is left out. ``calibrated`` times forwards of one micro-batch on every rank
at start-up; ``adaptive`` also moves shares toward the measured speeds every
``parallel.balance_every`` steps when the predicted step time improves by more than
:data:`HYSTERESIS`, or by less when two windows in a row ask for the same shares (one noisy
window does not move them; a split one micro-batch off its best, a few per cent slower, is not
kept for the whole run).

A rank that slows mid-run is rebalanced at the next move (within ``balance_every`` steps). One
whose speed, relative to the fastest rank's, stays below :data:`STRAGGLER_RATIO` of what its
calibration (or the shares it started with) said for :data:`STRAGGLER_WINDOWS` windows in a
row is reported once: a ``straggler`` event in the run directory, a warning, the metrics'
``balance_stragglers`` and the run summary. Under ``adaptive`` the shares a checkpoint holds
are where a resume on the same world and devices starts (:meth:`Balancer.load_state_dict`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
import torch.distributed as dist

from xirang_core.checkpoint.events import record_event
from xirang_core.data.shares import Shares, even_shares, proportional, step_time
from xirang_core.devices.cgroup import worker_quota

log = logging.getLogger("xirang.balance")

#: shares move at once when the predicted step time drops by more than this fraction, and
#: by less only when two windows in a row ask for the same shares
HYSTERESIS = 0.05
#: weight of the past windows in each rank's averaged speed (``adaptive``)
SMOOTHING = 0.5
#: forward-and-backward over forward time assumed until a rank has measured its own
WHOLE_OVER_FORWARD = 3.0
#: forwards timed at start-up for ``calibrated`` (after one untimed warm-up) ...
CALIBRATION_FORWARDS = 2
#: ... and for at least this long: a CPU quota (cgroup CFS, Kubernetes limits) is enforced per
#: 100 ms period, so a few forwards shorter than the quota's share of one run at full speed
CALIBRATION_MIN_S = 0.3
#: a rank is a straggler below this fraction of its expected speed relative to the fastest
STRAGGLER_RATIO = 0.6
#: ... for this many windows of ``balance_every`` steps in a row (``adaptive``)
STRAGGLER_WINDOWS = 3


def relative_speeds(speeds: list[float], expected: list[float]) -> list[float]:
    """Each rank's speed over its expected speed, as a fraction of the fastest rank's: 1.0 for
    the rank furthest ahead of its calibration, 0.4 for one at 40% of what it promised. A
    load that slows every rank alike leaves these at 1."""
    over = [v / max(e, 1e-12) for v, e in zip(speeds, expected, strict=True)]
    return [o / max(max(over), 1e-12) for o in over]


class Balancer:
    """One rank's view of the shares: how many micro-batches it runs, how its loss is scaled,
    its compute time, and (``adaptive``) the periodic move toward the measured speeds."""

    def __init__(
        self,
        mode: str,
        every: int,
        shares: Shares,
        rank: int,
        device: torch.device,
        run_dir: str = "",
    ) -> None:
        self.mode, self.every, self.shares, self.rank = mode, every, shares, rank
        self.device, self.run_dir = device, run_dir  # run_dir: rank 0 writes events there
        self.world = len(shares.counts)
        #: each rank's speed as calibrated (or as the shares it started with say), relative
        self.expected = [float(c) for c in shares.counts]
        self._lagging = [0] * self.world  # windows in a row each rank was far below it
        self.stragglers: dict[int, dict[str, Any]] = {}  # reported, by rank
        self.ratio = WHOLE_OVER_FORWARD  # forward and backward over forward, measured
        self._started = self._forward_s = 0.0
        self._window = [0.0, 0.0]  # micro-batches, compute seconds since the last move
        self._logged = [0.0, 0.0]  # the same since the last record
        #: every rank's (micro-batches, seconds) of the window and since the last record, as
        #: :meth:`meet` gathered them at the step's gradient sync
        self._window_met: list[tuple[float, float]] = []
        self._logged_met: list[tuple[float, float]] = []
        self._speeds: list[float] = []  # each rank's micro-batches/s, averaged over windows
        self._asked: Shares | None = None  # the shares the last window's speeds gave
        self.on_reshare: Any = None  # called with the new shares (the batches follow)

    @property
    def count(self) -> int:
        """Micro-batches this rank runs this step."""
        return self.shares.counts[self.rank]

    @property
    def divisor(self) -> float:
        """What each micro-batch's loss is divided by: ``M / W`` (``accum`` when even)."""
        return self.shares.total / self.world

    def start(self) -> None:
        """A micro-batch's forward begins."""
        self._sync()
        self._started = time.perf_counter()

    def forward_done(self, last: bool) -> None:
        """The forward ended; the last micro-batch's compute is its forward times the ratio
        (its backward waits for the gradient sync)."""
        self._sync()
        self._forward_s = time.perf_counter() - self._started
        if last:
            self._add(self._forward_s * self.ratio)

    def backward_done(self, last: bool) -> None:
        """The backward of a micro-batch without a collective ended: all of it is compute."""
        if last:
            return
        self._sync()
        whole = time.perf_counter() - self._started
        self._add(whole)
        if self._forward_s > 0:
            self.ratio = 0.8 * self.ratio + 0.2 * whole / self._forward_s

    def _add(self, seconds: float) -> None:
        for tally in (self._window, self._logged):
            tally[0] += 1
            tally[1] += seconds

    def _sync(self) -> None:
        synchronize(self.device)

    def meet(self, step: int, logs: bool) -> None:
        """Right after the gradient sync, where every rank has just arrived: gather, in one
        collective, the tallies this step's move (:meth:`after_step`) and record
        (:meth:`figures`) need. Gathered after the optimizer step, they would hold the fast
        ranks until the slowest one's optimizer step ended."""
        moves = self._moves(step)
        if not (moves or logs):
            return
        gathered = gather([*self._window, *self._logged], self.device)
        if moves:
            self._window, self._window_met = [0.0, 0.0], [(t[0], t[1]) for t in gathered]
        if logs:
            self._logged, self._logged_met = [0.0, 0.0], [(t[2], t[3]) for t in gathered]

    def _moves(self, step: int) -> bool:
        """Whether ``step`` may move the shares (``adaptive``, every ``balance_every``)."""
        return self.mode == "adaptive" and not step % self.every

    def after_step(self, step: int) -> bool:
        """Every ``balance_every`` steps under ``adaptive``: move the shares toward the ranks'
        speeds (gathered by :meth:`meet`) when that predicts a faster step; True when they
        moved."""
        if not self._moves(step):
            return False
        measured = [m / s if s > 0 else 0.0 for m, s in self._window_met]
        if not all(measured):
            return False
        # an exponential average over windows: one noisy window does not move the shares
        past = self._speeds or measured
        speeds = self._speeds = [
            SMOOTHING * p + (1 - SMOOTHING) * m for p, m in zip(past, measured, strict=True)
        ]
        moved = self.move(speeds)
        self.watch(step, speeds)
        return moved

    def move(self, speeds: list[float]) -> bool:
        """Take the shares ``speeds`` give when they predict a faster step: faster by more than
        :data:`HYSTERESIS`, or by any amount when the window before asked for them too. True
        when the shares moved."""
        target = proportional(self.shares.total, speeds)
        gain = 1 - step_time(target, speeds) / step_time(self.shares, speeds)
        again, self._asked = target == self._asked, target
        if gain <= 0 or (gain <= HYSTERESIS and not again):
            return False
        self._asked = None
        self.shares = target
        if self.on_reshare is not None:
            self.on_reshare(target)
        return True

    def watch(self, step: int, speeds: list[float]) -> None:
        """Count the windows each rank stays far below its expected speed; report a rank once
        it has for :data:`STRAGGLER_WINDOWS` in a row (rebalancing absorbs it, but its device
        is still not what it was calibrated as: throttled, shared or failing)."""
        for rank, ratio in enumerate(relative_speeds(speeds, self.expected)):
            self._lagging[rank] = self._lagging[rank] + 1 if ratio < STRAGGLER_RATIO else 0
            if self._lagging[rank] >= STRAGGLER_WINDOWS and rank not in self.stragglers:
                self._report(step, rank, ratio, speeds)

    def _report(self, step: int, rank: int, ratio: float, speeds: list[float]) -> None:
        found = {
            "rank": rank,
            "step": step,
            "speed_ratio": round(ratio, 3),
            "share": self.shares.counts[rank],
            "of": self.shares.total,
        }
        self.stragglers[rank] = found
        if self.rank != 0:
            return
        windows = f"{STRAGGLER_WINDOWS} windows of {self.every} steps"
        # the ranks' speeds (micro-batches/s) let the pool weigh a drain (xirang_pool)
        measured = [round(v, 6) for v in speeds]
        record_event(self.run_dir, "straggler", windows=STRAGGLER_WINDOWS, speeds=measured, **found)
        log.warning(
            "balance: rank %d is a straggler: at %.0f%% of its calibrated speed (relative to "
            "the fastest rank) for %s, at step %d; it now runs %d of the %d micro-batches",
            rank,
            100 * ratio,
            windows,
            step,
            found["share"],
            found["of"],
        )

    def figures(self, step_s: float, steps: int) -> dict[str, Any]:
        """For the metrics record, from the tallies :meth:`meet` gathered: each rank's share,
        compute time per step and ``balance_efficiency``: the step's lower bound (all
        micro-batches over the sum of the ranks' speeds) over its actual time."""
        gathered = self._logged_met
        speeds = [m / s if s > 0 else 0.0 for m, s in gathered]
        bound = self.shares.total / sum(speeds) if speeds and all(speeds) else 0.0
        stragglers = [self.stragglers[r] for r in sorted(self.stragglers)]
        return {
            "balance_shares": list(self.shares.counts),
            "balance_compute_ms": [round(1e3 * s / max(steps, 1), 3) for _, s in gathered],
            "balance_efficiency": round(bound / step_s, 4) if step_s > 0 else 0.0,
            **({"balance_stragglers": stragglers} if stragglers else {}),
        }

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (each rank's JSON): the shares, the speeds they came from,
        what was expected of each rank, the stragglers reported, and this rank's device."""
        return {
            "shares": list(self.shares.counts),
            "device": device_name(self.device),
            "speeds": self._speeds,
            "expected": self.expected,
            "stragglers": [self.stragglers[r] for r in sorted(self.stragglers)],
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Under ``adaptive``, start from the checkpoint's shares when every rank runs on the
        device it ran on then (same world, same device and CPU quota); otherwise keep the
        shares calibrated now: the saved ones described other devices. Every rank calls it
        (a collective)."""
        if self.mode != "adaptive":
            return
        state = state or {"shares": [], "device": ""}  # a run that did not balance saved none
        same = len(state["shares"]) == self.world and state["device"] == device_name(self.device)
        if not all(flag for (flag,) in gather([float(same)], self.device)):
            log.info("balance: the devices differ from the checkpoint's; shares as calibrated")
            return
        self.shares = Shares(tuple(state["shares"]))
        self._speeds, self.expected = list(state["speeds"]), list(state["expected"])
        self.stragglers = {s["rank"]: s for s in state["stragglers"]}
        if self.on_reshare is not None:
            self.on_reshare(self.shares)

    def calibrate(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> None:
        """``calibrated``/``adaptive`` without given shares: time forwards of one micro-batch
        (no gradients, so nothing reaches the first step) on every rank and share by speed.
        The untimed first forward takes any parameter gathering (FSDP) and warm-up."""
        seconds = forward_seconds(model, batch, self.device)
        self.expected = [1 / s for (s,) in gather([seconds], self.device)]
        self.shares = proportional(self.shares.total, self.expected)


class Unwatched:
    """The uniform split's stopwatch: nothing is timed."""

    def start(self) -> None:
        pass

    def forward_done(self, last: bool) -> None:
        pass

    def backward_done(self, last: bool) -> None:
        pass


def forward_seconds(
    model: torch.nn.Module, batch: tuple[torch.Tensor, ...], device: torch.device
) -> float:
    """This rank's measured speed, as the seconds one forward of ``batch`` takes on
    ``device`` (no gradients, so nothing reaches training): the first shares of
    ``parallel.balance`` and a pipeline's ``parallel.stage_layers=auto`` both start from it.
    The untimed first forward takes any parameter gathering (FSDP) and warm-up."""
    inputs = [t.to(device) for t in batch]
    forwards, elapsed = 0, 0.0
    with torch.no_grad():
        model(*inputs)
        synchronize(device)
        started = time.perf_counter()
        while forwards < CALIBRATION_FORWARDS or elapsed < CALIBRATION_MIN_S:
            model(*inputs)
            synchronize(device)
            forwards, elapsed = forwards + 1, time.perf_counter() - started
    return elapsed / forwards


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work, so a clock read after it counts that work."""
    if device.type != "cpu":
        getattr(torch, device.type).synchronize(device)


def device_name(device: torch.device) -> str:
    """What a rank computes on, as far as its speed goes: the device's model, and the CPU
    quota of the worker's cgroup (``scheduler.worker_quota``, a drill's ``slow``) if any."""
    module = getattr(torch, device.type, None)
    named = device.type != "cpu" and hasattr(module, "get_device_name")
    name = module.get_device_name(device) if named else device.type  # type: ignore[union-attr]
    quota = worker_quota()
    return f"{name} quota={quota}" if quota is not None else name


def gather(values: list[float], device: torch.device) -> list[tuple[float, ...]]:
    """Every rank's ``values`` (tallies: micro-batches and seconds), in rank order."""
    mine = torch.tensor(values, dtype=torch.float64, device=device)
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [tuple(values)]
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [tuple(float(v) for v in t) for t in every]


def for_run(config: dict[str, Any], ctx: Any) -> Balancer | None:
    """This rank's balancer, or None under ``parallel.balance=uniform`` (today's split)."""
    parallel, trainer = config["parallel"], config["trainer"]
    mode = parallel.get("balance", "uniform")
    if mode == "uniform":
        return None
    total = trainer["global_batch"] // trainer["micro_batch"]
    given = parallel.get("balance_shares") or []
    shares = Shares(tuple(given)) if given else even_shares(total, ctx.data_world)
    every = parallel.get("balance_every", 10)
    return Balancer(mode, every, shares, ctx.data_rank, ctx.device, ctx.run_dir)


def begin(balancer: Balancer, config: dict[str, Any], model: torch.nn.Module, batches: Any) -> None:
    """The first shares (given, or calibrated on the wrapped model with the first micro-batch)
    and the training batches reading by them from now on."""
    if not config["parallel"].get("balance_shares"):
        balancer.calibrate(model, batches.get(1, 0))
    batches.reshare(balancer.shares)
    balancer.on_reshare = batches.reshare


def summary_fields(last: dict[str, Any]) -> dict[str, Any]:
    """The run summary's view: the final shares, balance efficiency and the stragglers
    reported (the last record's); a pipeline's stage layers, busy and idle time per step."""
    pipeline = {
        key.removeprefix("pipeline_"): last[key] for key in last if key.startswith("pipeline_")
    }
    if "balance_shares" not in last:
        return {"pipeline": pipeline} if pipeline else {}
    return {
        "balance": {
            "shares": last["balance_shares"],
            "compute_ms": last["balance_compute_ms"],
            "efficiency": last["balance_efficiency"],
            "stragglers": last.get("balance_stragglers", []),
        }
    }
