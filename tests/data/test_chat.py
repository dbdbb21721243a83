"""``data=chat``: supervised fine-tuning on conversations, with the loss on assistant replies
only (prompt targets are -100 and the loss averages over the reply tokens alone)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import yaml
from torch.nn import functional as F
from xirang_data.chat import ChatDataset, ChatRows, Template, encode, segments, template_of
from xirang_gpt.model import GPT, GPTConfig
from xirang_tokenizers.bytes import ByteTokenizer

from tests.conftest import ONE_LAYER_GPT
from xirang import ConfigError, DataError
from xirang.data import Partition, TokenBatches, open_tokenizer
from xirang.testing import Kit
from xirang_core.data.step_loader import LoaderBatches
from xirang_core.data.tokens import NamedSource
from xirang_core.plugins import get_registry
from xirang_core.run import compose_config
from xirang_core.train.loop import Trainer
from xirang_core.train.worker import assemble, open_worker

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def conversation(i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Answer with the number."},
        {"role": "user", "content": f"What is {i} plus {i}?"},
        {"role": "assistant", "content": str(2 * i)},
        {"role": "user", "content": "And twice that?"},
        {"role": "assistant", "content": f"It is {4 * i}."},
    ]


def write_jsonl(path: Path, count: int) -> Path:
    lines = [json.dumps({"messages": conversation(i)}) for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def chatml_tokenizer(folder: Path) -> Path:
    """A byte-level BPE tokenizer.json trained here, with ChatML's special tokens and a
    tokenizer_config.json carrying its chat template, as a Hugging Face folder does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([json.dumps(conversation(i)) for i in range(50)], trainer)
    folder.mkdir(parents=True, exist_ok=True)
    backend.save(str(folder / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", "chat_template": CHATML}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def batches(tokenizer, template: Template, span: int) -> TokenBatches:
    conversations = [conversation(i) for i in range(6)]
    train = encode(conversations, template, tokenizer, span)
    rows = ChatRows(train, train, seed=0, shuffle=True)
    part = Partition(3, 1, 0)
    return TokenBatches([NamedSource("chat", rows)], part, 1, 0, "train", tokenizer, loss_mask=True)


def test_the_plain_template_trains_on_each_reply_and_its_end_only() -> None:
    tokenizer = ByteTokenizer("\n\n")
    encoded = encode([conversation(7)], Template(None), tokenizer, 256)
    ids, trained = encoded.tokens[0], encoded.trained[0]
    text = tokenizer.decode(ids[trained].tolist())
    assert text == "14\n\nIt is 28.\n\n"  # both replies, each ending with the marker
    prompt = tokenizer.decode(ids[~trained & (ids != 0)].tolist())
    assert prompt.startswith("system: Answer with the number.\nuser: What is 7 plus 7?\n")
    assert "assistant: " in prompt and "14" not in prompt


def test_a_chat_template_renders_and_only_the_assistant_turns_are_trained(tmp_path) -> None:
    from xirang_tokenizers.hf import HFTokenizer, read_backend

    folder = chatml_tokenizer(tmp_path / "tok")
    tokenizer = HFTokenizer(read_backend(folder / "tokenizer.json"), "<|im_end|>", folder)
    encoded = encode([conversation(3)], Template(folder), tokenizer, 256)
    ids, trained = encoded.tokens[0], encoded.trained[0]
    end = tokenizer.backend.token_to_id("<|im_end|>")
    replies = tokenizer.backend.decode(ids[trained].tolist(), skip_special_tokens=False)
    assert replies == "6<|im_end|>\nIt is 12.<|im_end|>\n"
    start = tokenizer.backend.token_to_id("<|im_start|>")
    assert ids[0] == start and not trained[ids == start].any()
    assert trained[ids == end].sum() == 2  # the two replies' ends; the prompts' are not


def test_masked_targets_give_the_cross_entropy_over_reply_tokens_only() -> None:
    tokenizer = ByteTokenizer("\n\n")
    source = batches(tokenizer, Template(None), span=97)
    inputs, targets = source.get(1)
    trained = torch.from_numpy(source.trained(source.positions(1, 0))[:, 1:])
    assert (targets[~trained] == -100).all() and (targets[trained] >= 0).all()
    assert 0 < int(trained.sum()) < trained.numel() // 4  # mostly prompt and padding
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, max_seq_len=96, vocab_size=257))
    with torch.no_grad():
        loss = model(inputs, targets)
        logits = model(inputs)
    # by hand: the mean over the trained positions of -log p(the next token)
    following = torch.from_numpy(source.rows(source.positions(1, 0)))[:, 1:]
    logp = torch.log_softmax(logits, dim=-1).gather(-1, following[..., None])[..., 0]
    torch.testing.assert_close(loss, -logp[trained].mean())
    flat = logits.reshape(-1, logits.size(-1))
    torch.testing.assert_close(loss, F.cross_entropy(flat, targets.reshape(-1), ignore_index=-100))
    unmasked = F.cross_entropy(flat, following.reshape(-1))
    assert abs(float(unmasked) - float(loss)) > 1e-3  # the prompts would have changed it


def test_dataloader_workers_keep_the_mask() -> None:
    source = batches(ByteTokenizer("\n\n"), Template(None), span=97)
    loader = LoaderBatches(source, last_step=4, num_workers=1)
    try:
        for step in (1, 2):
            for got, want in zip(loader.get(step), source.get(step), strict=True):
                assert torch.equal(got, want)
    finally:
        loader.close_workers()


def test_a_run_fine_tunes_on_a_jsonl_with_the_tokenizers_chat_template(
    xirang: Kit, tmp_path
) -> None:
    xirang.check("dataset", "chat")  # registered, and its class follows xirang.data.Dataset
    data = write_jsonl(tmp_path / "chat.jsonl", 20)
    folder = chatml_tokenizer(tmp_path / "tok")
    run = xirang.train(
        "data=chat",
        f"data.path={data}",
        "data.seq_len=64",
        "tokenizer=hf",
        f"tokenizer.path={folder}",
        "model=gpt_tiny",
        "trainer.max_steps=6",
        "trainer.eval_every=3",
        nproc=2,  # each worker reads the file, the template and the pin from config.yaml
    )
    assert run.returncode == 0, run.output
    assert run.summary["data_snapshot"].startswith("chat-") and run.summary["world_size"] == 2
    assert run.run_dir is not None
    config = yaml.safe_load((run.run_dir / "config.yaml").read_text())
    assert config["data"]["path"] == str(data) and config["runtime"]["chat_conversations"] == 20
    losses = [m["loss"] for m in run.metrics if "loss" in m]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert max(m["step"] for m in run.metrics if "loss" in m) == 6
    val = [m["val_loss"] for m in run.metrics if "val_loss" in m]  # held-out replies' loss
    assert len(val) >= 1 and all(np.isfinite(val))


def test_a_conversation_without_a_reply_is_one_error_naming_its_line(xirang: Kit, tmp_path) -> None:
    data = write_jsonl(tmp_path / "chat.jsonl", 3)
    lines = data.read_text().splitlines()
    lines[1] = json.dumps({"messages": [{"role": "user", "content": "hello?"}]})
    data.write_text("\n".join(lines) + "\n")
    run = xirang.train("data=chat", f"data.path={data}", in_process=False)
    assert run.returncode != 0
    assert f"xirang error: data.path={data} line 2: no assistant message" in run.output
    assert "Traceback" not in run.output


def test_a_template_in_chat_template_jinja_is_read_too(tmp_path) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "chat_template.jinja").write_text(CHATML)
    template = Template(folder)
    prompt = template.render(conversation(1)[:2], prompt=True)
    assert prompt.endswith("<|im_start|>user\nWhat is 1 plus 1?<|im_end|>\n<|im_start|>assistant\n")


def test_a_reply_past_seq_len_and_a_changed_file_are_each_one_error(tmp_path) -> None:
    tokenizer = ByteTokenizer("\n\n")
    with pytest.raises(DataError, match=r"conversation 1: its first assistant reply starts past"):
        encode([conversation(1)], Template(None), tokenizer, span=20)
    data = write_jsonl(tmp_path / "chat.jsonl", 4)
    pins = ChatDataset().prepare({"data": {"name": "chat", "path": str(data)}})
    config, snapshot = {"data": pins.data}, pins.ids[0]
    write_jsonl(data, 5)
    with pytest.raises(DataError, match=f"changed since the launch pinned {snapshot}"):
        ChatDataset().pin_tokens(config, tokenizer)


def test_a_separate_validation_file_is_held_out_whole(tmp_path) -> None:
    """Issue 53: ``data=chat data.val=<file.jsonl>`` said "data.val: no such setting"; now
    every conversation of that file is held out and every one of data.path's trains."""
    train = write_jsonl(tmp_path / "train.jsonl", 3)
    val = tmp_path / "val.jsonl"
    val.write_text(json.dumps({"messages": conversation(100)}) + "\n")
    run = [*ONE_LAYER_GPT, "device=cpu", "data=chat", f"data.path={train}", f"data.val={val}"]
    config = compose_config([*run, "data.seq_len=128"])
    assert config["data"]["val_snapshot"].startswith("chat-")
    trained, held = ChatDataset().batches(config, 0, 1, 3, 1)
    tokenizer = ByteTokenizer("\n\n")
    text = [tokenizer.decode(row.tolist()) for row in trained.get(1)[0]]
    assert sorted(t.split("What is ", 1)[1][:1] for t in text) == ["0", "1", "2"]
    assert "What is 100 plus 100?" in tokenizer.decode(held.get(1)[0][0].tolist())
    with pytest.raises(ConfigError, match=r"data.val=.* and data.val_fraction=0.2 name two"):
        compose_config([*run, "data.val_fraction=0.2"])


def test_accumulated_micro_batches_train_as_the_whole_batch_of_replies(tmp_path) -> None:
    """Replies of very different lengths fall unevenly into micro-batches: the step still
    averages over all its reply tokens, so 4 micro-batches update as one batch of 8 does."""
    lines = []
    for i in range(24):
        reply = "ok " * (1 + 9 * (i % 4))
        messages = [
            {"role": "user", "content": f"say {i}"},
            {"role": "assistant", "content": reply},
        ]
        lines.append(json.dumps({"messages": messages}))
    (tmp_path / "chat.jsonl").write_text("\n".join(lines) + "\n")
    run = [*ONE_LAYER_GPT, "device=cpu", "trainer.global_batch=8", "trainer.max_steps=3"]
    run += ["data=chat", f"data.path={tmp_path / 'chat.jsonl'}", "data.seq_len=48"]
    whole = trained_in_process([*run, "trainer.grad_accum=1"], tmp_path / "whole")
    accumulated = trained_in_process([*run, "trainer.grad_accum=4"], tmp_path / "accum")
    assert all(torch.allclose(accumulated[k], whole[k], atol=1e-5) for k in whole)


def trained_in_process(overrides: list[str], run_dir: Path) -> dict[str, torch.Tensor]:
    """The weights after one worker, in this process, trains the launched run ``overrides``."""
    config = compose_config(overrides)  # the launch: runtime resolved, the data pinned
    registry = get_registry()
    run_dir.mkdir()
    ctx = open_worker(config, str(run_dir), registry)
    try:
        parts = assemble(config, ctx, registry)
        trainer = Trainer(
            parts.wrapped, parts.optimizer, parts.train, parts.settings, ctx, registry.hook, None
        )
        trainer.fit()
        return {k: v.clone() for k, v in parts.model.state_dict().items()}
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize(
    "tokenizer", [("tokenizer=bytes",), ("tokenizer=bpe", "tokenizer.vocab_size=300")]
)
def test_an_hf_export_renders_chats_with_the_plain_template_the_run_trained_on(
    tmp_path: Path, tokenizer: tuple[str, ...]
) -> None:
    """A chat run whose tokenizer has no chat template trains on the plain one; its hf export's
    tokenizer_config.json carries it, so transformers' ``apply_chat_template`` renders a
    conversation as the run's row holds it (a reply's end: bytes' "\\n\\n", bpe's
    ``<|endoftext|>``), and a prompt with the generation prompt in the ids the run put
    before the reply. (The run tokenizes ``assistant: `` apart from the reply, so bpe's ids of
    a whole conversation differ where it would merge the space into the reply's first word.)"""
    from transformers import AutoTokenizer
    from xirang_ckpt.export import export_tokenizer

    data = write_jsonl(tmp_path / "chat.jsonl", 4)
    run = [*ONE_LAYER_GPT, "device=cpu", "data=chat", f"data.path={data}", "data.seq_len=128"]
    launched = compose_config([*run, *tokenizer])
    config = yaml.safe_load(yaml.safe_dump(launched.to_dict()))  # as config.yaml holds it
    export_tokenizer(config, tmp_path / "export")
    exported = AutoTokenizer.from_pretrained(tmp_path / "export", local_files_only=True)
    ours = open_tokenizer(config)
    for messages in (conversation(0), conversation(3)):
        pieces = segments(messages, template_of(config), ours)
        ids = [i for piece, _ in pieces for i in piece]
        assert exported.apply_chat_template(messages, tokenize=False) == exported.decode(ids)
        prompt = exported.apply_chat_template(
            messages[:2], add_generation_prompt=True, return_dict=False
        )
        assert prompt == [i for piece, _ in pieces[:3] for i in piece]  # before the first reply
        if tokenizer == ("tokenizer=bytes",):  # one id a byte: the whole conversation too
            assert exported.apply_chat_template(messages, return_dict=False) == ids
