"""Tokenizers: bpe trains once on the snapshot and is cached, every option round-trips text,
saved files load in ``transformers`` and encode the same, and bad settings are one error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xirang_data.training import resolve_dataset
from xirang_tokenizers import bpe
from xirang_tokenizers.bytes import ByteTokenizer
from xirang_tokenizers.hf import HFTokenizer

from xirang_core.config import compose
from xirang_core.data.tokenizer import open_tokenizer, resolve_tokenizer
from xirang_core.errors import ConfigError, DataError
from xirang_core.plugins import get_registry

BPE = {"name": "bpe", "vocab_size": 300, "min_frequency": 2}
TEXT = "def naïve_3(Σ):\n    return Σ * 3 + len('naïve')\n"


def resolved(config: dict) -> tuple:
    resolve_dataset(config["data"], config["storage"])
    return resolve_tokenizer(config, get_registry())


@pytest.fixture
def trained(run_config) -> tuple:
    """A bpe tokenizer of at most 300 ids trained on the code snapshot, and its run config."""
    return resolved(run_config(dict(BPE)))


def test_bpe_trains_on_the_snapshot_once_and_workers_load_it(run_config, monkeypatch) -> None:
    first, config = resolved(run_config(dict(BPE)))
    file = Path(config["runtime"]["tokenizer"]["path"])
    assert file.parent.parent.name == "tokenizers" and file.name == "tokenizer.json"
    assert 257 < first.vocab_size <= 300 and config["model"]["vocab_size"] == first.vocab_size
    stamp = file.stat().st_mtime_ns
    calls = []
    real = bpe.train
    monkeypatch.setattr(bpe, "train", lambda *a: calls.append(1) or real(*a))
    again, _ = resolved(run_config(dict(BPE)))
    worker = open_tokenizer(config)
    assert calls == [] and file.stat().st_mtime_ns == stamp
    assert again.fingerprint == worker.fingerprint == first.fingerprint
    assert worker.encode_batch([TEXT])[0].tolist() == first.encode_batch([TEXT])[0].tolist()
    resolved(run_config({**BPE, "vocab_size": 280}))  # other settings: another tokenizer
    assert calls == [1]


def test_bpe_learns_merges_and_ends_documents_with_its_eos(trained) -> None:
    tokenizer, _ = trained
    [ids] = tokenizer.encode_batch([TEXT])
    eos = tokenizer.backend.token_to_id(bpe.EOS)
    assert ids[-1] == eos and eos not in ids[:-1].tolist()
    assert len(ids) - 1 < len(TEXT.encode()) / 2  # merges: well under a token per byte
    assert tokenizer.decode(ids.tolist()) == TEXT  # the marker is special: decoded away


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=80))
def test_every_text_round_trips(trained, text: str) -> None:
    tokenizer, _ = trained
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert ByteTokenizer("\n\n").decode(ByteTokenizer("\n\n").encode(text)) == text


def test_decode_drops_ids_a_padded_model_can_draw(trained) -> None:
    tokenizer, _ = trained
    ids = tokenizer.encode(TEXT)
    assert tokenizer.decode([*ids, tokenizer.vocab_size, 50_000]) == TEXT
    assert ByteTokenizer("\n\n").decode([100, 256, 101, 50_000]) == "de"


def test_bytes_is_the_utf8_stream_with_its_separator() -> None:
    tokenizer = ByteTokenizer("\n\n")
    [ids] = tokenizer.encode_batch([TEXT])
    assert ids.tobytes() == TEXT.encode() + b"\n\n" and ids.dtype.itemsize == 1
    assert tokenizer.vocab_size == 256


@pytest.mark.parametrize("which", ["bpe", "bytes"])
def test_saved_files_load_in_transformers_and_encode_the_same(trained, which, tmp_path) -> None:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tokenizer = trained[0] if which == "bpe" else ByteTokenizer("\n\n")
    tokenizer.save(tmp_path)
    ours = tokenizer.encode(TEXT)
    auto = AutoTokenizer.from_pretrained(tmp_path)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    for hf in (auto, fast):
        assert hf.encode(TEXT, add_special_tokens=False) == ours
        assert hf.decode(ours) == TEXT
    if which == "bpe":
        assert auto.eos_token == bpe.EOS
    else:
        assert ours == list(TEXT.encode())


def local_tokenizer_json(folder: Path, eos: str | None) -> Path:
    """A tokenizer.json trained here on a few lines (no download), with the special token
    ``</s>``; with ``eos``, a folder naming it in tokenizer_config.json, as Hugging Face
    tokenizer folders do."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=270,
        special_tokens=["</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(["def f(x):\n\n    return x"] * 20, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    backend.save(str(folder / "tokenizer.json"))
    if eos:
        (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos}))
    return folder / "tokenizer.json"


def test_hf_reads_a_local_folder_and_its_eos_token(run_config, tmp_path) -> None:
    folder = local_tokenizer_json(tmp_path / "tok", eos="</s>").parent
    tokenizer, config = resolved(run_config({"name": "hf", "path": str(folder), "eos_token": ""}))
    assert isinstance(tokenizer, HFTokenizer) and 257 < tokenizer.vocab_size <= 270
    assert config["model"]["vocab_size"] == tokenizer.vocab_size
    [ids] = tokenizer.encode_batch(["def x"])
    assert ids[-1] == tokenizer.backend.token_to_id("</s>") == 0
    assert tokenizer.decode(ids.tolist()) == "def x"
    worker = open_tokenizer(config)
    assert worker.fingerprint == tokenizer.fingerprint
    out = tmp_path / "saved"
    worker.save(out)
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "</s>"


def test_hf_without_an_eos_token_ends_documents_with_a_blank_line(run_config, tmp_path) -> None:
    file = local_tokenizer_json(tmp_path / "tok", eos=None)
    tokenizer, _ = resolved(run_config({"name": "hf", "path": str(file), "eos_token": ""}))
    [ids] = tokenizer.encode_batch(["def x"])
    assert 0 not in ids.tolist() and tokenizer.decode(ids.tolist()) == "def x\n\n"


def test_a_different_tokenizer_file_after_launch_is_refused(run_config, tmp_path) -> None:
    file = local_tokenizer_json(tmp_path / "tok", eos=None)
    _, config = resolved(run_config({"name": "hf", "path": str(file), "eos_token": ""}))
    data = json.loads(file.read_text())
    data["model"]["vocab"]["lambda"] = len(data["model"]["vocab"])
    file.write_text(json.dumps(data))
    with pytest.raises(DataError, match="changed since the run was launched"):
        open_tokenizer(config)


# --- the config: vocabulary and bad input, each one error before anything starts -------------


def test_model_vocab_zero_takes_the_tokenizers_and_a_padded_one_is_kept() -> None:
    assert compose(["tokenizer=bpe", "model.vocab_size=0"])["model"]["vocab_size"] == 4096
    assert compose([])["model"]["vocab_size"] == 4096  # the default llama_tiny's 0, with bpe
    assert compose(["model=gpt_tiny", "tokenizer=bytes"])["model"]["vocab_size"] == 256
    assert compose(["tokenizer=bpe", "model.vocab_size=4160"])["model"]["vocab_size"] == 4160


def test_a_model_vocab_smaller_than_the_tokenizers_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        compose(["tokenizer=bpe", "model=gpt_tiny", "model.vocab_size=256"])
    message = str(err.value)
    assert "model.vocab_size=256" in message and "tokenizer=bpe" in message
    assert "4096" in message and "model.vocab_size=0" in message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["tokenizer=sentencepiece"], r"tokenizer=sentencepiece: no such option.*bpe, bytes, hf"),
        (["tokenizer=hf"], r"tokenizer\.path: a value is required"),
        (["tokenizer=hf", "tokenizer.path=/no/such/tokenizer.json"], r"tokenizer\.path=.*no such"),
        (["tokenizer=bpe", "tokenizer.vocab_size=100"], r"tokenizer\.vocab_size=100.*257"),
        (["tokenizer=bpe", "+tokenizer.merges=3"], r"tokenizer\.merges: no such setting"),
    ],
)
def test_bad_tokenizer_settings_are_one_config_error(overrides, expected) -> None:
    with pytest.raises(ConfigError, match=expected):
        compose(overrides)


def test_a_tokenizer_json_that_does_not_parse_is_a_config_error(tmp_path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": 7}}')
    with pytest.raises(ConfigError, match=r"tokenizer\.path=.*not a tokenizer\.json"):
        compose(["tokenizer=hf", f"tokenizer.path={bad}"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"holds no tokenizer\.json"):
        compose(["tokenizer=hf", f"tokenizer.path={empty}"])


def test_a_tokenizer_with_millions_of_ids_is_refused_before_a_model_is_sized(tmp_path) -> None:
    """A tokenizer.json whose ids reach two million once sized a model until the host ran out
    of memory; it is one config error now, and tokenizer.max_vocab lets a real one through."""
    file = local_tokenizer_json(tmp_path / "tok", eos=None)
    data = json.loads(file.read_text())
    data["model"]["vocab"]["zzzz"] = 2_000_000
    file.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"2,000,001 embedding rows.*tokenizer\.max_vocab="):
        compose(["tokenizer=hf", f"tokenizer.path={file}"])
    config = compose(["tokenizer=hf", f"tokenizer.path={file}", "tokenizer.max_vocab=3000000"])
    assert config["model"]["vocab_size"] == 2_000_001


def test_listing_and_composing_leave_the_tokenizers_library_unimported() -> None:
    """``xirang plugins`` lists bpe and hf (with the install hint) where ``tokenizers`` is
    missing: neither the plugin's modules nor composing a bpe config import it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from xirang_core.config import compose\n"
        "from xirang_core.plugins import get_registry\n"
        "registry = get_registry()\n"
        "for name in registry.names('tokenizer'):\n"
        "    registry.load('tokenizer', name)\n"
        "compose(['tokenizer=bpe'])\n"
        "print('tokenizers' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
    for name in ("bpe", "hf"):
        spec = get_registry().spec("tokenizer", name)
        assert spec.requires == ("tokenizers",) and "pip install" in spec.install
