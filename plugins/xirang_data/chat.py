"""Conversations for supervised fine-tuning (``data=chat data.path=FILE.jsonl``).

Each line of the file is ``{"messages": [{"role": ..., "content": ...}, ...]}``, as TRL and
the OpenAI fine-tuning API read them. A conversation is rendered with the tokenizer's chat
template when its folder has one (``tokenizer_config.json``'s ``chat_template``, or
``chat_template.jinja``), otherwise with :data:`PLAIN`. Only the assistant's replies are
trained on: every other target is -100 (ignored, as in transformers), so
the models' cross-entropy averages over assistant tokens alone.

Which tokens are the assistant's is found by rendering: the text before reply ``i`` is the
template applied to the messages before it with the generation prompt, the reply is what the
template adds for message ``i``. Each piece is tokenised on its own, so the mask is exact.
Every row holds one conversation from its start (cut at ``data.seq_len + 1`` tokens, padded
with targets left out), so no row is without a trained token and none attends across
conversations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xirang import ConfigError, DataError, xirang_home
from xirang.data import NamedSource, Partition, TokenBatches, open_tokenizer
from xirang.specs import DataPins, TextCorpus, Tokenizer
from xirang_data.chat_settings import check

#: the template without a chat template: each message is ``"{role}: {content}\\n"``, except
#: that an assistant reply is ``"assistant: "`` (not trained on) then its content and the
#: tokenizer's end-of-document marker (trained on, so the model learns where a reply ends)
PLAIN = "{role}: {content}\n"
#: what comes before an assistant reply's content in :data:`PLAIN`
REPLY = "assistant: "
#: :data:`PLAIN` as a jinja chat template, the form transformers' ``apply_chat_template`` reads:
#: an export of a run trained with it renders conversations as the run did (``{marker}``: the
#: end-of-document marker's text and ``{reply}`` :data:`REPLY`, each as a jinja string)
PLAIN_JINJA = (
    "{{% for m in messages %}}{{% if m['role'] == 'assistant' %}}"
    "{{{{ {reply} + m['content'] + {marker} }}}}"
    "{{% else %}}{{{{ m['role'] + ': ' + m['content'] + '\\n' }}}}{{% endif %}}{{% endfor %}}"
    "{{% if add_generation_prompt %}}{{{{ {reply} }}}}{{% endif %}}"
)
#: what fills a row after its conversation (its targets are left out of the loss)
PAD = 0


def read_conversations(
    path: str, key: str = "data.path", least: int = 2
) -> tuple[list[list[dict[str, str]]], str]:
    """The file's conversations and its content id (``chat-`` and a hash of its bytes);
    a line that is not a conversation with an assistant reply is one error naming it
    (``key``: the setting that names the file; ``least``: 2 where one is held out of it)."""
    file = Path(path).expanduser()
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key}={path}: cannot be read ({exc.strerror})") from None
    conversations = []
    for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        if line.strip():
            conversations.append(_conversation(line, f"{key}={path} line {number}"))
    if len(conversations) < least:
        why = " (one is held out for the evaluation loss)" if least > 1 else ""
        raise DataError(
            f"{key}={path}: {len(conversations)} conversation(s); at least {least} "
            f"{'are' if least > 1 else 'is'} needed{why}"
        )
    return conversations, "chat-" + hashlib.sha256(raw).hexdigest()[:16]


def _conversation(line: str, where: str) -> list[dict[str, str]]:
    """One line's messages, checked."""
    example = '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", ...}]}'
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise DataError(f"{where}: not JSON ({exc}); each line is {example}") from None
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        raise DataError(f"{where}: each line is {example} (role and content strings)")
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: no assistant message; only assistant replies are trained on")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


class Template:
    """The tokenizer folder's chat template (a jinja2 template, rendered as transformers'
    ``apply_chat_template`` renders it); ``text`` is "" where there is none (:data:`PLAIN`)."""

    def __init__(self, folder: Path | None) -> None:
        self.source, self.text, self.specials = folder, "", {}
        config = _json(folder / "tokenizer_config.json") if folder else {}
        text = config.get("chat_template")
        if isinstance(text, list):  # several named templates: the default one
            text = next((t.get("template") for t in text if t.get("name") == "default"), None)
        if folder and text is None and (folder / "chat_template.jinja").is_file():
            text = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        if isinstance(text, str):
            self.text = text
            for key in ("bos_token", "eos_token"):
                value = config.get(key)
                value = value.get("content") if isinstance(value, dict) else value
                self.specials[key] = value if isinstance(value, str) else ""

    def render(self, messages: list[dict[str, str]], prompt: bool) -> str:
        """The template applied to ``messages`` (``prompt``: with the generation prompt)."""
        try:
            return self._compiled.render(
                messages=messages, add_generation_prompt=prompt, **self.specials
            )
        except Exception as exc:  # jinja2's errors, and the template's own raise_exception
            raise DataError(f"the chat template in {self.source} failed: {exc}") from None

    @property
    def _compiled(self) -> Any:
        try:
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            raise ConfigError(
                f"{self.source} has a chat template: rendering it needs jinja2 (pip install "
                "jinja2, or transformers which brings it)"
            ) from None
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent)
        env.globals["raise_exception"] = _raise
        return env.from_string(self.text)


def _raise(message: str) -> None:
    raise ValueError(message)


def _json(file: Path) -> dict[str, Any]:
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def plain_chat_template(tokenizer: Tokenizer) -> str:
    """:data:`PLAIN_JINJA` for ``tokenizer``: a reply ends with its end-of-document marker,
    the eos token's text where it has one (transformers reads it back as that token), else
    the separator's text (bytes: ``"\\n\\n"``)."""
    eos = getattr(tokenizer, "eos_token", "")
    if not (isinstance(eos, str) and eos):
        eos = tokenizer.decode(tokenizer.encode_batch([""])[0].tolist())  # the marker alone
    return PLAIN_JINJA.format(marker=json.dumps(eos), reply=json.dumps(REPLY))


def template_of(config: Mapping[str, Any]) -> Template:
    """The chat template of the run's tokenizer: the folder of the tokenizer.json it read."""
    path = (config.get("runtime") or {}).get("tokenizer", {}).get("path")
    return Template(Path(path).parent if path else None)


def segments(
    messages: list[dict[str, str]], template: Template, tokenizer: Tokenizer
) -> list[tuple[list[int], bool]]:
    """The conversation's token ids in pieces, each with whether it is trained on."""
    if not template.text:
        pieces = []
        for m in messages:
            if m["role"] == "assistant":
                pieces.append((tokenizer.encode(REPLY), False))
                pieces.append((tokenizer.encode_batch([m["content"]])[0].tolist(), True))
            else:
                pieces.append((tokenizer.encode(PLAIN.format(**m)), False))
        return pieces
    return [(tokenizer.encode(text), trained) for text, trained in _rendered(messages, template)]


def _rendered(messages: list[dict[str, str]], template: Template) -> Iterator[tuple[str, bool]]:
    """The rendered conversation as (text, is an assistant reply) pieces."""
    done = ""
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = template.render(messages[:i], prompt=True)
        after = template.render(messages[: i + 1], prompt=False)
        if not before.startswith(done) or not after.startswith(before):
            raise DataError(
                f"the chat template in {template.source} does not render a conversation as "
                "its prompt followed by the reply, so the reply's tokens cannot be told apart"
            )
        yield before[len(done) :], False
        yield after[len(before) :], True
        done = after
    yield template.render(messages, prompt=False)[len(done) :], False


@dataclass
class Encoded:
    """Conversations as rows of ``span`` tokens and whether each is trained on."""

    tokens: np.ndarray  # [conversations, span] int64
    trained: np.ndarray  # [conversations, span] bool
    bytes_per_token: float  # reply bytes per trained token


def encode(
    conversations: list[list[dict[str, str]]], template: Template, tokenizer: Tokenizer, span: int
) -> Encoded:
    """Each conversation cut to ``span`` tokens and padded; one whose first reply starts past
    ``span`` would train on nothing and is one error."""
    tokens = np.full((len(conversations), span), PAD, dtype=np.int64)
    trained = np.zeros((len(conversations), span), dtype=bool)
    for row, messages in enumerate(conversations):
        pieces = segments(messages, template, tokenizer)
        ids = [i for piece, _ in pieces for i in piece][:span]
        mask = [t for piece, t in pieces for _ in piece][:span]
        tokens[row, : len(ids)], trained[row, : len(mask)] = ids, mask
        if not trained[row, 1:].any():
            raise DataError(
                f"conversation {row + 1}: its first assistant reply starts past "
                f"data.seq_len={span - 1} tokens, so it would train on nothing; raise "
                "data.seq_len or shorten the conversation"
            )
    replies = sum(
        len(m["content"].encode()) for c in conversations for m in c if m["role"] == "assistant"
    )
    return Encoded(tokens, trained, replies / max(1, int(trained[:, 1:].sum())))


class ChatRows:
    """The :class:`xirang.data.TokenSource` of encoded conversations: training row ``r`` is
    conversation ``r mod n`` of epoch ``r // n``'s seeded order; held-out rows are in order."""

    def __init__(self, train: Encoded, val: Encoded, seed: int, shuffle: bool) -> None:
        self.train, self.val, self.seed, self.shuffle = train, val, seed, shuffle
        self.span = train.tokens.shape[1]
        self.bytes_per_token = train.bytes_per_token

    def _order(self, rows: np.ndarray) -> np.ndarray:
        n = len(self.train.tokens)
        rows = np.asarray(rows, dtype=np.int64)
        if not self.shuffle:
            return rows % n
        out = np.empty_like(rows)
        for epoch in np.unique(rows // n):
            pick = rows // n == epoch
            out[pick] = np.random.default_rng([self.seed, int(epoch)]).permutation(n)[
                rows[pick] % n
            ]
        return out

    def _val(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(rows, dtype=np.int64) % len(self.val.tokens)

    def train_rows(self, rows: np.ndarray, sparse: bool = False) -> np.ndarray:
        return self.train.tokens[self._order(rows)]

    def val_rows(self, rows: np.ndarray) -> np.ndarray:
        return self.val.tokens[self._val(rows)]

    def train_loss_mask(self, rows: np.ndarray) -> np.ndarray:
        return self.train.trained[self._order(rows)]

    def val_loss_mask(self, rows: np.ndarray) -> np.ndarray:
        return self.val.trained[self._val(rows)]

    def train_doc_starts(self, rows: np.ndarray) -> np.ndarray:
        return self._starts(len(rows))

    def val_doc_starts(self, rows: np.ndarray) -> np.ndarray:
        return self._starts(len(rows))

    def _starts(self, count: int) -> np.ndarray:
        """A row is one conversation: its only document starts at its first token."""
        starts = np.zeros((count, self.span), dtype=bool)
        starts[:, 0] = True
        return starts

    def settle(self) -> None:
        """Nothing in flight: every row is in memory."""

    def close(self) -> None:
        """Nothing to release."""


class ChatDataset:
    """The :class:`xirang.data.Dataset` of ``data=chat``."""

    def prepare(self, config: Mapping[str, Any]) -> DataPins:
        cfg = check(config["data"])
        _, snapshot = read_conversations(cfg.path, least=1 if cfg.val else 2)
        pinned = {"path": str(Path(cfg.path).expanduser().resolve()), "snapshot": snapshot}
        if cfg.val:  # a separate held-out file, pinned as the training file is
            _, held = read_conversations(cfg.val, "data.val", least=1)
            pinned |= {"val": str(Path(cfg.val).expanduser().resolve()), "val_snapshot": held}
        return DataPins({**config["data"], **pinned}, ids=(snapshot,))

    def text_corpus(self, config: Mapping[str, Any]) -> TextCorpus:
        conversations, snapshot = read_conversations(config["data"]["path"], least=1)
        texts = ["".join(PLAIN.format(**m) for m in c) for c in conversations]

        def batches() -> Iterator[list[str]]:
            yield texts

        return TextCorpus(snapshot, len(texts), batches, xirang_home())

    def pin_tokens(self, config: Mapping[str, Any], tokenizer: Tokenizer) -> DataPins:
        """Encode every conversation at launch, so a bad one stops the launch, not a worker."""
        (train, held), snapshot = self._split(config), config["data"]["snapshot"]
        template = template_of(config)
        for part in (train, held):
            encode(part, template, tokenizer, config["data"]["seq_len"] + 1)
        runtime: dict[str, Any] = {"chat_conversations": len(train) + len(held)}
        if not template.text:  # the plain one: an hf export carries it (tokenizer_config.json)
            runtime["chat_template"] = plain_chat_template(tokenizer)
        return DataPins(runtime=runtime, ids=(snapshot,))

    def batches(
        self, config: Mapping[str, Any], rank: int, world: int, micro: int, accum: int
    ) -> tuple[TokenBatches, TokenBatches]:
        data, seed, tokenizer = config["data"], config["seed"], open_tokenizer(config)
        trained, held = self._split(config)
        template, span = template_of(config), data["seq_len"] + 1
        train = encode(trained, template, tokenizer, span)
        val = encode(held, template, tokenizer, span)
        rows = ChatRows(train, val, seed, data["shuffle"])
        part, sources = Partition(micro, world, rank), [NamedSource("chat", rows)]
        return (
            TokenBatches(sources, part, accum, seed, "train", tokenizer, loss_mask=True),
            TokenBatches(sources, part, 1, seed, "val", tokenizer, loss_mask=True),
        )

    def _split(
        self, config: Mapping[str, Any]
    ) -> tuple[list[list[dict[str, str]]], list[list[dict[str, str]]]]:
        """The conversations trained on and those held out: all of ``data.val``'s file when
        set, else the last ``data.val_fraction`` of ``data.path``'s."""
        data = config["data"]
        if data.get("val"):
            return self._read(data, "path"), self._read(data, "val")
        conversations = self._read(data, "path")
        held = max(1, round(len(conversations) * data["val_fraction"]))
        held = min(held, len(conversations) - 1)
        return conversations[:-held], conversations[-held:]

    @staticmethod
    def _read(data: Mapping[str, Any], key: str) -> list[list[dict[str, str]]]:
        """The conversations of ``data.<key>``, refused when the file changed since the
        launch pinned it."""
        pinned = data["snapshot" if key == "path" else "val_snapshot"]
        conversations, snapshot = read_conversations(data[key], f"data.{key}", least=1)
        if snapshot != pinned:
            raise DataError(
                f"data.{key}={data[key]} changed since the launch pinned {pinned} "
                f"(it is now {snapshot}); launch the run again"
            )
        return conversations
