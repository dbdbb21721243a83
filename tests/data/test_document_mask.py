"""``data.document_mask=true``: attention within documents for packed rows (Llama family)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from xirang_data.training import run_batches
from xirang_llama.model import Llama, LlamaConfig

from tests.conftest import QUICK, run_dirs
from tests.data.conftest import Make
from xirang_core.config import compose
from xirang_core.data.document_mask import segments
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry

TINY = LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, vocab_size=50)


@pytest.fixture(scope="module")
def llama() -> Llama:
    torch.manual_seed(0)
    return Llama(TINY).eval()


def test_a_packed_row_gives_each_documents_logits_alone(llama: Llama) -> None:
    generator = torch.Generator().manual_seed(1)
    docs = [torch.randint(0, 50, (n,), generator=generator) for n in (5, 11, 1, 7)]
    row = torch.cat(docs)[None]
    starts = np.zeros((1, row.shape[1]), dtype=bool)
    starts[0, np.cumsum([0] + [len(d) for d in docs[:-1]])] = True
    documents = torch.from_numpy(segments(starts)).long()
    with torch.no_grad():
        packed = llama(row, documents=documents)[0]
        unmasked = llama(row)[0]
        alone = torch.cat([llama(d[None])[0] for d in docs])
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=0)
    assert (unmasked - alone).abs().max() > 1e-2  # without the mask documents see each other


def test_a_family_that_cannot_is_refused_naming_the_key() -> None:
    registry = get_registry()
    with pytest.raises(ConfigError, match=r"data.document_mask=true: model family gpt .*llama"):
        compose(["model=gpt_tiny", "tokenizer=bytes", "data.document_mask=true"], registry)
    with pytest.raises(ConfigError, match=r"data.document_mask=true: parallel=tp does not"):
        compose(["parallel=tp", "data.document_mask=true"], registry)
    assert compose(["data.document_mask=true"], registry)["data"]["document_mask"] is True


def test_batches_mark_every_document_start_of_packed_rows(make_dataset: Make) -> None:
    """A document starts right after each end marker ("\\n\\n"; the texts hold none), across
    shards, shuffled blocks, epochs and the held-out rows, and nowhere else."""
    tier, _ = make_dataset(n=200, per_shard=20)
    config = {
        "seed": 5,
        "storage": {"name": "local", "root": ""},
        "tokenizer": {"name": "bytes", "separator": "\n\n"},
        "data": {"name": "snapshot", "uri": tier.root, "seq_len": 16, "val_fraction": 0.1},
    }
    config["data"]["document_mask"] = True
    train, val = run_batches(config, 0, 1, 4, 1)
    batches = [train.get(step) for step in range(1, 80)] + [val.get(i) for i in range(6)]
    boundaries = 0
    for x, y, documents in batches:
        tokens = torch.cat([x, y[:, -1:]], dim=1)
        after_end = (tokens[:, :-2] == 10) & (tokens[:, 1:-1] == 10)  # positions 2 .. seq
        starts = documents[:, 2:] != documents[:, 1:-1]
        assert torch.equal(starts, after_end[:, : starts.shape[1]])
        boundaries += int(starts.sum())
    assert boundaries > len(batches)  # rows do pack several documents


@pytest.mark.slow
def test_a_llama_run_trains_with_documents_masked(run_xirang, make_dataset: Make, tmp_path) -> None:
    tier, _ = make_dataset(n=400, per_shard=50)
    small = ("model.n_layers=1", "model.dim=32", "model.n_heads=2", "model.n_kv_heads=1")
    done = run_xirang(
        "model=llama_tiny",
        *small,
        "model.ffn_dim=64",
        "tokenizer=bytes",
        f"data.uri={tier.root}",
        "data.seq_len=32",
        "trainer.global_batch=4",
        "data.document_mask=true",
        *QUICK,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["data"]["document_mask"] is True
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["final_loss"] < summary["first_loss"]
