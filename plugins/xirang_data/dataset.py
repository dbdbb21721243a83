"""A run's dataset: the ``data`` config group resolved to one pinned snapshot and its tiers."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from xirang import ConfigError, xirang_home
from xirang.data import FsspecTier, RetryPolicy, check_separate, did_you_mean
from xirang_data.fetch import TierSettings
from xirang_data.snapshot import Snapshot, load


@dataclass
class DataSettings:
    """Every ``data.*`` key of ``data=stdlib|snapshot|mixture`` but the option's name;
    ``conf/data/*.yaml`` documents them. The registered schema: the run's config is checked
    against it when composed, so a wrong key or type stops there, naming this plugin."""

    uri: str = ""
    snapshot: str = ""
    seq_len: int = 128
    val_fraction: float = 0.01
    #: held-out data: "" (the tail ``val_fraction`` of each source), a share ("0.05"), or a
    #: separate prepared dataset root whose documents are all held out
    val: str = ""
    #: the pinned snapshot of a ``val`` root ("" = its latest; config.yaml records the one used)
    val_snapshot: str = ""
    shuffle: bool = True
    shuffle_block: int = 4
    cache_dir: str = ""
    cache_limit_bytes: int = 8 * 2**30
    memory_limit_bytes: int = 2 * 2**30
    prefetch_shards: int = 4
    origin_concurrency: int = 8
    origin_requests_per_s: float = 0.0
    origin_deadline_s: float = 300.0
    #: attention within a document in packed rows (model families that support it)
    document_mask: bool = False
    #: DataLoader processes reading training batches ahead (0: the training process reads them)
    num_workers: int = 0
    #: data=mixture: weighted snapshots, each {uri, snapshot (optional pin), weight}
    sources: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class DataConfig(DataSettings):
    """The whole ``data`` section, the option's name with its settings."""

    name: str = "stdlib"


@dataclass(frozen=True)
class Source:
    """One snapshot a run trains on, with its mixture weight."""

    uri: str
    snapshot: str = ""
    weight: float = 1.0


def check(data: dict[str, Any]) -> DataConfig:
    """``data`` as a :class:`DataConfig`; unknown keys name the valid ones."""
    known = {f.name for f in fields(DataConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"data.{unknown[0]}: no such setting. {did_you_mean(unknown[0], known)}"
            f"Valid: {', '.join(sorted(known))}"
        )
    cfg = DataConfig(**data)
    if not 0 <= cfg.val_fraction < 1:
        raise ConfigError(f"data.val_fraction={cfg.val_fraction}: must be in [0, 1)")
    cfg.val_fraction = _held_out_share(cfg)
    for key in ("seq_len", "shuffle_block", "origin_concurrency"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"data.{key}={getattr(cfg, key)}: must be at least 1")
    if not isinstance(cfg.num_workers, int) or cfg.num_workers < 0:
        raise ConfigError(
            f"data.num_workers={cfg.num_workers}: must be a whole number >= 0 (0 reads in the "
            "training process)"
        )
    if cfg.name == "mixture":
        _check_sources(cfg.sources)
    elif cfg.name != "stdlib" and not cfg.uri:
        raise ConfigError(f"data={cfg.name} needs data.uri=<dataset root, folder or s3://...>")
    return cfg


#: ``data.val_fraction``'s default, which a ``data.val`` may replace without a conflict
VAL_FRACTION = DataConfig.val_fraction


def _held_out_share(cfg: DataConfig) -> float:
    """The share of each training source held out: ``data.val_fraction``, the share
    ``data.val`` names, or none when ``data.val`` is a separate dataset. Two different
    shares, or a share beside a separate dataset, name two held-out sets: refused."""
    val = str(cfg.val).strip()
    if not val:
        return cfg.val_fraction
    share = _as_share(val)
    wanted = share if share is not None else 0.0
    if cfg.val_fraction not in (VAL_FRACTION, wanted):
        raise ConfigError(
            f"data.val={val} and data.val_fraction={cfg.val_fraction} name two held-out sets; "
            f"set only data.val (a share in (0, 1) of each source's documents, or a separate "
            f"prepared dataset root)"
        )
    return wanted


def _as_share(val: str) -> float | None:
    """``data.val`` as a share of documents, or None where it names a dataset root."""
    try:
        share = float(val)
    except ValueError:
        return None
    if not 0 < share < 1:
        raise ConfigError(
            f"data.val={val}: a share of documents must be in (0, 1) (e.g. data.val=0.05); "
            f"or name a prepared dataset root (xirang data prepare SRC DST; data.val=DST)"
        )
    return share


def held_out_source(data: dict[str, Any]) -> Source | None:
    """The separate dataset ``data.val`` names (all its documents held out), or None when
    the held-out rows are each training source's tail."""
    val = str(data.get("val") or "").strip()
    if not val or _as_share(val) is not None:
        return None
    return Source(val, data.get("val_snapshot", ""))


def _check_sources(sources: Any) -> None:
    example = "data.sources=[{uri:/data/code,weight:0.7},{uri:/data/prose,weight:0.3}]"
    if not isinstance(sources, list) or not sources:
        raise ConfigError(f"data=mixture needs data.sources, a list of snapshots: {example}")
    for i, raw in enumerate(sources):
        known = {f.name for f in fields(Source)}
        if not isinstance(raw, dict) or not raw.get("uri") or set(raw) - known:
            raise ConfigError(
                f"data.sources[{i}]={raw!r}: each source is {{uri, snapshot, weight}} with a uri; "
                f"for example {example}"
            )
        weight = raw.get("weight", 1.0)
        if not isinstance(weight, int | float) or weight <= 0:
            raise ConfigError(f"data.sources[{i}].weight={weight!r}: must be a number > 0")


def sources(data: dict[str, Any]) -> list[Source]:
    """The snapshots of a resolved ``data`` section: its mixture's, or its one snapshot."""
    if data.get("name") == "mixture":
        return [Source(**raw) for raw in data["sources"]]
    return [Source(data["uri"], data["snapshot"])]


def resolve(data: dict[str, Any], storage: dict[str, Any] | None) -> tuple[FsspecTier, Snapshot]:
    """The origin tier and the pinned snapshot; records ``uri`` and ``snapshot`` in ``data`` so
    the run's config.yaml names exactly the bytes it trains on."""
    from xirang.data import origin_errors, tier_for
    from xirang_data.stdlib_corpus import ensure_prepared

    cfg = check(data)
    data["val_fraction"] = cfg.val_fraction  # as held out: config.yaml says what was
    _pin_held_out(data, storage)
    if cfg.name == "mixture":
        return _resolve_mixture(data, storage)
    if cfg.name == "stdlib" and cfg.uri:
        # data.uri=ROOT alone (as the stdlib option's own comment invites) trains on ROOT: the
        # run says so, rather than calling the user's dataset the embedded corpus
        data["name"] = "snapshot"
    uri = cfg.uri or str(ensure_prepared())
    tier = tier_for(uri, storage)
    with origin_errors(uri):
        snap = load(tier, cfg.snapshot)
    data.update(uri=uri, snapshot=snap.id)
    return tier, snap


def _pin_held_out(data: dict[str, Any], storage: dict[str, Any] | None) -> None:
    """Pin the snapshot of a separate held-out dataset (``data.val_snapshot``)."""
    from xirang.data import origin_errors, tier_for

    source = held_out_source(data)
    if source is None:
        return
    with origin_errors(source.uri):
        data["val_snapshot"] = load(tier_for(source.uri, storage), source.snapshot).id


def _resolve_mixture(
    data: dict[str, Any], storage: dict[str, Any] | None
) -> tuple[FsspecTier, Snapshot]:
    """Pin every source's snapshot; ``uri`` and ``snapshot`` name the first source (the run's
    ``data_snapshot``); a tokenizer that learns trains on every source by weight."""
    from xirang.data import origin_errors, tier_for

    first = None
    for raw in data["sources"]:
        tier = tier_for(raw["uri"], storage)
        with origin_errors(raw["uri"]):
            snap = load(tier, raw.get("snapshot", ""))
        raw["snapshot"] = snap.id
        first = first or (tier, snap)
    assert first is not None, "a mixture has at least one source (checked with the config)"
    data.update(uri=data["sources"][0]["uri"], snapshot=first[1].id)
    return first


def tier_settings(cfg: DataConfig, origin_root: str) -> TierSettings:
    """Cache and origin limits; local origins are read in place, remote ones cached on disk."""
    remote = "://" in origin_root and not origin_root.startswith("file://")
    cache_dir = cfg.cache_dir or (str(xirang_home() / "cache" / "shards") if remote else "")
    if cache_dir:
        check_separate(cache_dir, origin_root)
    return TierSettings(
        cache_dir=cache_dir,
        cache_limit_bytes=cfg.cache_limit_bytes,
        memory_limit_bytes=cfg.memory_limit_bytes,
        prefetch_shards=cfg.prefetch_shards,
        retry=RetryPolicy(
            max_concurrency=cfg.origin_concurrency,
            max_requests_per_s=cfg.origin_requests_per_s,
            deadline_s=cfg.origin_deadline_s,
        ),
    )
