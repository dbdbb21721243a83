"""The Llama family's module: zoo shapes, causality, learning, meta-device construction, init."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from xirang_llama.model import Llama, LlamaConfig, attend, project, repeat_kv, takes_grouped_heads
from xirang_llama.parallelize import LlamaParallelize

from xirang_core.data.document_mask import attention_mask
from xirang_core.train.init import materialize

ZOO = Path(__file__).parents[3] / "plugins" / "xirang_llama" / "conf" / "model"
TINY = LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, vocab_size=64)


def zoo(name: str) -> dict:
    values = yaml.safe_load((ZOO / f"{name}.yaml").read_text())
    return {k: v for k, v in values.items() if k not in ("family", "name")}


@pytest.mark.parametrize(
    ("name", "billions"), [("llama3_1b", 1.236), ("llama3_8b", 8.030), ("llama3_70b", 70.554)]
)
def test_zoo_matches_the_published_parameter_counts(name: str, billions: float) -> None:
    """Built on the meta device (no memory): the counts of Meta's model cards, and the
    planner's shape agrees with the module."""
    with torch.device("meta"):
        model = Llama.from_config(zoo(name))
    total = model.num_params(non_embedding=False)
    assert total / 1e9 == pytest.approx(billions, abs=0.001)
    assert LlamaParallelize().shape(zoo(name), 2048).params == total
    assert all(p.is_meta for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "low", "high"), [("llama_tiny", 1e6, 3e6), ("llama_small", 20e6, 40e6)]
)
def test_cpu_zoo_sizes_take_the_tokenizer_vocabulary(name: str, low: float, high: float) -> None:
    settings = zoo(name)
    assert settings["vocab_size"] == 0  # the tokenizer's, filled when the config is composed
    with torch.device("meta"):
        model = Llama.from_config({**settings, "vocab_size": 4096})
    layers = model.num_params(non_embedding=False) - model.embed_tokens.weight.numel()
    assert low <= layers <= high


def test_unresolved_vocabulary_is_refused() -> None:
    with pytest.raises(ValueError, match="vocab_size=0"):
        Llama.from_config({**vars(TINY), "vocab_size": 0})


def test_grouped_heads_must_divide() -> None:
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        Llama.from_config({**vars(TINY), "n_kv_heads": 3})


def test_future_tokens_do_not_change_earlier_logits() -> None:
    torch.manual_seed(0)
    model = Llama(TINY).eval()
    x = torch.randint(0, TINY.vocab_size, (2, 12))
    changed = x.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % TINY.vocab_size
    with torch.no_grad():
        a, b = model(x), model(changed)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:], atol=1e-3)


@pytest.mark.parametrize("tied", [False, True])
def test_a_short_training_run_learns(tied: bool) -> None:
    """A repeating sequence: after 40 AdamW steps the loss is far below the uniform guess."""
    torch.manual_seed(0)
    model = Llama(LlamaConfig(**{**vars(TINY), "tie_embeddings": tied}))
    x = torch.arange(33).repeat(4, 1) % 11
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = model(x[:, :-1], x[:, 1:]).item()
    for _ in range(40):
        optimizer.zero_grad()
        loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        optimizer.step()
    assert first > 3.5 and loss.item() < 0.5 * first


def test_meta_build_materialises_to_the_same_weights() -> None:
    """Created on the meta device and materialised (``to_empty``, the shared init, the RoPE
    tables): the weights of an ordinary build with the same seed, and the same logits."""
    eager = Llama(TINY)
    with torch.device("meta"):
        lazy = Llama(TINY)
    materialize(lazy, "cpu", seed=torch.initial_seed())
    for (name, a), b in zip(eager.state_dict().items(), lazy.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    x = torch.randint(0, TINY.vocab_size, (1, 8))
    assert torch.equal(eager(x), lazy(x))


def test_init_follows_the_llama3_recipe() -> None:
    cfg = LlamaConfig(dim=256, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=512, vocab_size=512)
    params = dict(Llama(cfg).named_parameters())
    std = {name: p.std().item() for name, p in params.items()}
    assert std["embed_tokens.weight"] == pytest.approx(1.0, rel=0.05)
    assert std["layers.0.self_attn.q_proj.weight"] == pytest.approx(0.02, rel=0.05)
    assert std["layers.3.self_attn.o_proj.weight"] == pytest.approx(0.02 / 8**0.5, rel=0.05)
    assert std["layers.1.mlp.down_proj.weight"] == pytest.approx(0.02 / 2, rel=0.05)
    assert std["lm_head.weight"] == pytest.approx(256**-0.5, rel=0.1)
    assert params["lm_head.weight"].abs().max() <= 3 * 256**-0.5
    assert torch.equal(params["norm.weight"], torch.ones(256))


def test_flops_follow_palm() -> None:
    model = Llama(TINY)
    n = model.num_params()
    assert n == model.num_params(non_embedding=False) - TINY.vocab_size * TINY.dim
    assert model.flops_per_token(16) == 6 * n + 12 * TINY.n_layers * TINY.dim * 16


def test_generate_appends_tokens_within_the_vocabulary() -> None:
    torch.manual_seed(0)
    model = Llama(LlamaConfig(**{**vars(TINY), "max_seq_len": 8})).eval()
    out = model.generate(torch.zeros(1, 3, dtype=torch.long), new_tokens=10)
    assert out.shape == (1, 13) and int(out.max()) < TINY.vocab_size


def test_init_reads_names_through_wrappers() -> None:
    """A name with a wrapper's prefix (recompute, compile) draws as the bare name does."""
    model, gen = Llama(TINY), torch.Generator
    for name in ("layers.1.mlp.down_proj.weight", "embed_tokens.weight", "norm.weight"):
        shape = dict(model.named_parameters())[name].shape
        wrapped = name.replace("layers.1.", "layers.1._checkpoint_wrapped_module.")
        a, b = torch.empty(shape), torch.empty(shape)
        model.param_init(name, a, gen().manual_seed(1))
        model.param_init("_orig_mod." + wrapped, b, gen().manual_seed(1))
        assert torch.equal(a, b), name


@settings(max_examples=15, deadline=None)
@given(widths=st.lists(st.integers(1, 24), min_size=1, max_size=3), rows=st.integers(1, 5))
def test_stacked_projections_compute_each_projection(widths: list[int], rows: int) -> None:
    """One matmul against the stacked weights gives every projection's own output and the
    same gradients, so the fused q/k/v and gate/up train as the separate modules would."""
    torch.manual_seed(len(widths) * 31 + rows)
    linears = [torch.nn.Linear(8, w, bias=False) for w in widths]
    x = torch.randn(2, rows, 8, requires_grad=True)
    fused = project(x, *linears)
    sum(t.square().sum() for t in fused).backward()
    fused_grads = [x.grad.clone(), *(p.weight.grad.clone() for p in linears)]
    x.grad = None
    for p in linears:
        p.weight.grad = None
    apart = [p(x) for p in linears]
    sum(t.square().sum() for t in apart).backward()
    for got, want in zip(fused, apart, strict=True):
        torch.testing.assert_close(got, want)
    for got, want in zip(fused_grads, [x.grad, *(p.weight.grad for p in linears)], strict=True):
        torch.testing.assert_close(got, want)


def test_rope_tables_are_kept_out_of_the_state_dict_and_cover_longer_inputs() -> None:
    """The cached cos/sin tables are not weights (checkpoints and exports keep Hugging Face's
    names), and an input longer than ``max_seq_len`` rotates as a model built for it would."""
    short = Llama(TINY)
    assert not [name for name in short.state_dict() if "rope" in name]
    long = Llama(LlamaConfig(**{**TINY.__dict__, "max_seq_len": 2 * TINY.max_seq_len}))
    long.load_state_dict(short.state_dict())
    x = torch.randint(0, TINY.vocab_size, (1, TINY.max_seq_len + 3))
    torch.testing.assert_close(short(x), long(x), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("device", "dtype", "masked", "grouped"),
    [
        ("cuda", torch.float32, False, False),  # fp32: the memory-efficient kernel, expanded
        ("cuda", torch.bfloat16, True, False),  # a document mask: flash cannot take it
        ("cuda", torch.bfloat16, False, True),  # flash and cuDNN take grouped heads
        ("cuda", torch.float16, False, True),
        ("cpu", torch.float32, True, True),  # the CPU's flash kernel takes them in any case
        ("privateuseone", torch.bfloat16, False, False),  # Ascend registers as this
    ],
)
def test_grouped_heads_reach_only_the_kernels_that_take_them(
    device: str, dtype: torch.dtype, masked: bool, grouped: bool
) -> None:
    """``enable_gqa`` on CUDA leaves only flash, cuDNN and math: an fp32 or masked attention
    there gets its key/value heads expanded instead of the math kernel."""
    assert takes_grouped_heads(torch.device(device), dtype, masked) is grouped


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("masked", [False, True])
def test_expanded_key_value_heads_attend_like_grouped_ones(
    dtype: torch.dtype, masked: bool
) -> None:
    """The expansion (what CUDA fp32 and masked runs now take) gives the output of the
    grouped kernel (what every run took before), causal and within documents."""
    torch.manual_seed(0)
    q = torch.randn(2, 8, 16, 8, dtype=dtype)
    k, v = (torch.randn(2, 2, 16, 8, dtype=dtype) for _ in range(2))
    documents = torch.tensor([[0] * 5 + [1] * 11, [0] * 16])
    mask = attention_mask(documents)[1] if masked else None
    grouped = attend(q, k, v, mask)
    expanded = torch.nn.functional.scaled_dot_product_attention(
        q, repeat_kv(k, 4), repeat_kv(v, 4), attn_mask=mask, is_causal=mask is None
    )
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(expanded, grouped, **tolerance)
    head = 5  # query head 5 reads key/value head 5 // 4 = 1
    alone = torch.nn.functional.scaled_dot_product_attention(
        q[:, head : head + 1], k[:, 1:2], v[:, 1:2], attn_mask=mask, is_causal=mask is None
    )
    torch.testing.assert_close(expanded[:, head : head + 1], alone, **tolerance)


def test_one_rope_table_serves_every_layer() -> None:
    """The cos/sin table is one buffer of the model, not one per layer (n_layers copies:
    640 MiB per GPU at 70B), also after a meta-device build is materialised; layers given
    it rotate as they would computing the rotation themselves."""
    cfg = LlamaConfig(**{**TINY.__dict__, "n_layers": 4})
    with torch.device("meta"):
        lazy = Llama(cfg)
    materialize(lazy, "cpu", seed=0)
    for model in (Llama(cfg), lazy):
        tables = [name for name, _ in model.named_buffers() if "rope" in name]
        assert tables == ["rope"]
        x = torch.randn(1, 8, cfg.dim)
        layer = model.layers["2"]
        torch.testing.assert_close(layer(x, rope=model.rope), layer(x), rtol=0, atol=1e-6)
