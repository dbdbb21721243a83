"""``model.pretrained=<dir>``: start a run from a Hugging Face directory (config.json and
safetensors, as ``xirang ckpt export --format hf`` or ``save_pretrained`` writes it).

The family's :class:`~xirang_core.specs.HFInterop` maps the directory to its own settings and
parameter names. When the config is composed the directory is checked without reading any
weight: the mapping runs on meta tensors made from the safetensors headers, and the model is
built on the meta device, so differing settings, missing or unexpected names and wrong shapes
are one ``ConfigError`` before a worker starts. Each worker then loads the real tensors into
the whole model before the strategy wraps it. Safetensors hold no code (no pickle).
"""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xirang_core.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import nn

CONFIG_FILE = "config.json"
#: the tokenizer a pretrained folder may carry (``save_pretrained``, ``ckpt export --format hf``)
TOKENIZER_FILE = "tokenizer.json"
#: safetensors dtype codes and the torch dtypes they hold
DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
#: at most this many names per kind of problem in an error
SHOWN = 4


def hf_config_file(settings: dict[str, Any]) -> Path:
    """The Hugging Face config.json a ``model`` section names: ``model.config`` (a file or a
    directory; ``model=hf``'s), else ``model.pretrained``'s. Every plugin that reads a Hugging
    Face model's config (the hf family, a strategy that checks its architecture) finds it here."""
    given = settings.get("config") or settings.get("pretrained") or ""
    key = "model.config" if settings.get("config") else "model.pretrained"
    if not given:
        raise ConfigError(
            "model.config: required for model=hf: a local directory holding config.json, or the "
            "config.json itself (or set model.pretrained=<dir> to take the config from there)"
        )
    path = Path(given).expanduser()
    path = path / CONFIG_FILE if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(
            f"{key}={given}: no such file or directory with a {CONFIG_FILE} (nothing is "
            f"downloaded: give a local path)"
        )
    return path.resolve()


def folder_tokenizer(model: dict[str, Any], overrides: list[str]) -> dict[str, str] | None:
    """``tokenizer=hf tokenizer.path=<folder>`` for a ``model.pretrained`` folder that holds
    its tokenizer, unless the command line (``overrides``) chose one: the weights' embedding
    rows stand for that tokenizer's ids, and another tokenizer's ids would index the wrong
    rows (silently, when its vocabulary is no larger)."""
    folder = model.get("pretrained")
    if not folder or any(names_tokenizer(o) for o in overrides):
        return None
    path = Path(folder).expanduser().resolve()
    return {"name": "hf", "path": str(path)} if (path / TOKENIZER_FILE).is_file() else None


def names_tokenizer(override: str) -> bool:
    """Whether a command-line override sets the tokenizer (``tokenizer=``, ``tokenizer.*=``)."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key == "tokenizer" or key.startswith("tokenizer.")


def tokenizer_fix(folder: str) -> str:
    """The settings that give a run ``folder``'s weights their own tokenizer's ids."""
    path = Path(folder).expanduser().resolve()
    if (path / TOKENIZER_FILE).is_file():
        return f"tokenizer=hf tokenizer.path={path}"
    return (
        f"tokenizer=hf tokenizer.path=<the folder of the tokenizer.json the weights were "
        f"trained with> ({path} holds no {TOKENIZER_FILE})"
    )


def check_pretrained(
    spec: Any, settings: dict[str, Any], given: AbstractSet[str] = frozenset()
) -> dict[str, Any]:
    """``settings`` with ``pretrained`` made absolute and the directory's shape taken, except
    the settings in ``given`` (the user's), once the directory fits the run's model."""
    import torch

    folder = Path(settings["pretrained"]).expanduser().resolve()
    settings = {**settings, "pretrained": str(folder)}
    hf_config, tensors = read_hf_dir(folder, meta=True)
    hf_settings, state = _from_hf(spec, folder, hf_config, tensors)
    settings |= {k: v for k, v in hf_settings.items() if k in settings and k not in given}
    differing = {k: v for k, v in hf_settings.items() if k in settings and settings[k] != v}
    if differing:
        listed = ", ".join(f"{k} (run {settings[k]!r}, dir {v!r})" for k, v in differing.items())
        fix = " ".join(f"model.{k}={v}" for k, v in differing.items())
        raise ConfigError(
            f"model.pretrained={folder}: the weights were saved with other model settings than "
            f"the run's: {listed}. Set the run's to match: {fix}"
        )
    with torch.device("meta"):
        model = spec.load().from_config(settings)
    _refuse_misfit(folder, model, state)
    return settings


def load_pretrained(model: nn.Module, config: dict[str, Any], registry: Any) -> None:
    """Copy the ``model.pretrained`` weights into ``model`` (whole, materialised, not yet
    wrapped by a strategy); nothing happens without ``model.pretrained``."""
    folder = config["model"].get("pretrained")
    if not folder:
        return
    if any(p.is_meta for p in model.parameters()):
        # copying into meta parameters would silently keep nothing
        raise RuntimeError("load_pretrained needs a materialised model, not one on meta")
    spec = registry.spec("model", config["model"]["family"])
    hf_config, tensors = read_hf_dir(Path(folder))
    _, state = _from_hf(spec, Path(folder), hf_config, tensors)
    _refuse_misfit(Path(folder), model, state)
    model.load_state_dict(state, strict=False)  # only tied copies are absent (checked above)


def read_hf_dir(folder: Path, meta: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config.json contents, tensors by name)`` of a Hugging Face directory; with ``meta``
    the tensors are shape-only (from the file headers), and nothing else is read."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    config_file = folder / CONFIG_FILE
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not config_file.is_file() or not files:
        raise ConfigError(
            f"model.pretrained={folder}: not a Hugging Face model directory (it needs "
            f"{CONFIG_FILE} and *.safetensors weights; nothing is downloaded)"
        )
    try:
        hf_config = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"model.pretrained={folder}: {CONFIG_FILE} is not JSON ({exc})") from None
    tensors: dict[str, Any] = {}
    for file in files:
        if not meta:
            tensors.update(load_file(str(file)))
            continue
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                tensors[name] = _meta_tensor(handle.get_slice(name))
    return hf_config, tensors


def _meta_tensor(view: Any) -> torch.Tensor:
    import torch

    dtype = getattr(torch, DTYPES.get(view.get_dtype(), "float32"))
    return torch.empty(view.get_shape(), dtype=dtype, device="meta")


def _from_hf(
    spec: Any, folder: Path, hf_config: dict[str, Any], tensors: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    interop = spec.load_hf()
    if interop is None:
        raise ConfigError(
            f"model.pretrained: the model family '{spec.name}' has no Hugging Face mapping, so it "
            f"cannot start from {folder}; leave model.pretrained empty"
        )
    try:
        return interop.from_hf(hf_config, tensors)
    except (KeyError, ValueError) as exc:
        raise ConfigError(
            f"model.pretrained={folder}: not weights the '{spec.name}' family can read: {exc}"
        ) from None


def _refuse_misfit(folder: Path, model: nn.Module, state: dict[str, Any]) -> None:
    problems = state_misfit(model, state)
    if problems:
        raise ConfigError(
            f"model.pretrained={folder}: its weights do not fit the model this run builds: "
            + "; ".join(problems)
        )


def state_misfit(model: nn.Module, state: dict[str, Any]) -> list[str]:
    """Why ``state`` cannot be loaded strictly into ``model``: names missing (a tied copy may
    be absent when the weight it shares is given), names unexpected, shapes that differ."""
    own = model.state_dict(keep_vars=True)
    aliases: dict[int, set[str]] = {}
    for name, tensor in own.items():
        aliases.setdefault(id(tensor), set()).add(name)
    missing = [n for n in own if n not in state and not aliases[id(own[n])] & state.keys()]
    unexpected = [n for n in state if n not in own]
    shapes = [
        f"{n} is {list(t.shape)} in the directory, {list(own[n].shape)} in the model"
        for n, t in state.items()
        if n in own and tuple(t.shape) != tuple(own[n].shape)
    ]
    problems = [f"missing {_some(missing)}"] if missing else []
    problems += [f"unexpected {_some(unexpected)}"] if unexpected else []
    return problems + shapes[:SHOWN]


def _some(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more
