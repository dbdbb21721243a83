"""LoRA through ``peft`` for any model family: the ``model.lora_*`` settings, their checks at
compose, the adapters put into a model once its pretrained weights are in, and a trained run's
adapters merged into the weights or written as peft's own adapter folder.

A family's settings schema inherits :class:`LoraSettings` and calls :func:`check_settings` and
:func:`check_run`; its model calls :func:`inject` from ``after_weights`` (the ``model=hf`` family
wraps its transformers model with peft's ``get_peft_model`` instead, which knows the
architecture's default targets). Importing this module imports neither torch nor peft.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xirang_core.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import nn

#: the strategies LoRA runs under: the sharding strategies' split plans name the model's own
#: modules, which the adapters wrap
STRATEGIES = ("single", "ddp")
#: the adapters' name in peft's state (one adapter per run)
ADAPTER = "default"


@dataclass
class LoraSettings:
    """``lora_rank``: LoRA adapters of that rank over the frozen pretrained weights (0: off),
    scaled by ``lora_alpha / lora_rank``, with ``lora_dropout`` on their input, on the linear
    layers named by ``lora_targets`` (by the last part of their name, as peft matches them)."""

    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(default_factory=list)


def check_settings(settings: dict[str, Any]) -> None:
    """``model.lora_*`` in range, and LoRA only over pretrained weights (``model.pretrained``)."""
    rank, alpha, dropout = settings["lora_rank"], settings["lora_alpha"], settings["lora_dropout"]
    if rank < 0 or alpha <= 0 or not 0 <= dropout < 1:
        raise ConfigError(
            f"model.lora_rank={rank}, lora_alpha={alpha}, lora_dropout={dropout}: the rank is "
            "0 (off) or more, alpha above 0 and the dropout in [0, 1)"
        )
    if rank and not settings.get("pretrained"):
        raise ConfigError(
            "model.lora_rank: LoRA trains adapters over pretrained weights; set "
            "model.pretrained=<folder with config.json and *.safetensors>"
        )


def check_run(config: dict[str, Any]) -> None:
    """LoRA runs under ``parallel=single`` or ``ddp``, and needs peft installed."""
    if not config["model"].get("lora_rank"):
        return
    strategy = config["parallel"]["name"]
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"model.lora_rank with parallel={strategy}: LoRA runs under "
            f"parallel={' or parallel='.join(STRATEGIES)}"
        )
    try:
        import peft  # noqa: F401
    except ImportError:
        raise ConfigError("model.lora_rank needs peft: pip install 'xirang[lora]'") from None


def check_targets(targets: list[str], linear: list[str], where: str) -> None:
    """The named targets must be among ``linear`` (the last parts of the names of ``where``'s
    linear layers); the error names the ones it has."""
    missing = [t for t in targets if t not in linear]
    if missing:
        raise ConfigError(
            f"model.lora_targets: {', '.join(missing)} is not a linear layer of {where}; "
            f"its linear layers are {', '.join(sorted(linear))}"
        )


def lora_config(settings: dict[str, Any], default_targets: list[str] | None = None) -> Any:
    """peft's ``LoraConfig`` for the run's ``model`` settings (no targets named: the
    ``default_targets``, or peft's choice for a transformers architecture when None)."""
    from peft import LoraConfig

    return LoraConfig(
        r=settings["lora_rank"],
        lora_alpha=settings["lora_alpha"],
        lora_dropout=settings["lora_dropout"],
        target_modules=list(settings["lora_targets"]) or default_targets,
        bias="none",
        task_type="CAUSAL_LM",
    )


def base_model_name(settings: dict[str, Any]) -> str:
    """The pretrained folder an adapter folder names as its base (``adapter_config.json``'s
    ``base_model_name_or_path``, which ``AutoPeftModelForCausalLM`` loads): relative to the
    working directory, as ``model.pretrained`` is read, so no path of this machine is in it."""
    import os

    folder = Path(settings["pretrained"]).expanduser().resolve()
    return os.path.relpath(folder)


def inject(model: nn.Module, settings: dict[str, Any], default_targets: list[str]) -> None:
    """Adapters put into ``model``'s target layers in place (peft's
    ``inject_adapter_in_model``: the model keeps its class and methods), every other weight
    frozen, so the optimizer, the gradients and DDP's all-reduce see only the adapters."""
    from peft import inject_adapter_in_model

    inject_adapter_in_model(lora_config(settings, default_targets), model, ADAPTER)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(".lora_" in name)


def merge_injected(
    build: Callable[[], nn.Module], settings: dict[str, Any], defaults: list[str], state: Any
) -> dict[str, torch.Tensor]:
    """A run's state with injected adapters as the plain model's: the model ``build`` makes
    (on the meta device) gets the adapters and ``state``'s tensors, peft merges each adapter
    into the weight it adapts, and the names lose peft's ``base_layer`` level. peft merges in
    place, so the weights merged into are copies: ``state`` stays as it was given."""
    import torch
    from peft.tuners.lora import LoraLayer

    with torch.device("meta"):
        model = build()
        inject(model, settings, defaults)
    copied = {k: v.clone() if ".base_layer." in k else v for k, v in state.items()}
    model.load_state_dict(copied, strict=True, assign=True)
    for module in model.modules():
        if isinstance(module, LoraLayer):
            module.merge(adapter_names=[ADAPTER])
    return {
        name.replace(".base_layer", ""): tensor.detach()
        for name, tensor in model.state_dict().items()
        if ".lora_" not in name
    }


def save_injected(
    settings: dict[str, Any],
    state: dict[str, torch.Tensor],
    out: Path,
    defaults: list[str],
    rename: Callable[[str], str],
) -> int:
    """A run's injected adapters as peft's own folder (``adapter_config.json`` and
    ``adapter_model.safetensors``) for the transformers model its family exports to:
    ``rename`` turns a module name of the run's model into the transformers model's. Returns
    how many tensors were written."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    config = lora_config(settings, defaults)
    config.base_model_name_or_path = base_model_name(settings)
    config.save_pretrained(str(out))
    adapters = {
        f"base_model.model.{rename(name.replace(f'.{ADAPTER}.', '.'))}": tensor.contiguous()
        for name, tensor in state.items()
        if ".lora_" in name
    }
    save_file(adapters, str(out / "adapter_model.safetensors"))
    return len(adapters)
