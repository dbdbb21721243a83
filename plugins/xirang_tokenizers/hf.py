"""A Hugging Face ``tokenizers`` tokenizer as the run's tokenizer (``tokenizer=hf``), read
from local files only; bpe is the same class over a tokenizer it trained itself.

``tokenizers`` is imported inside the functions that need it, so listing plugins and
validating a config that does not select this option never imports it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from xirang import ConfigError, DataError
from xirang.specs import TextCorpus

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
#: what ends a document when the tokenizer names no end-of-document token
SEPARATOR = "\n\n"
#: the most ids a tokenizer may bring (the largest published vocabularies hold about 262k):
#: the model's embedding and output layers get a row per id
MAX_VOCAB = 1 << 20


@dataclass
class HFSettings:
    """``tokenizer=hf``: ``path`` is a tokenizer.json or a folder holding one; ``eos_token``
    the token that ends each document ("" = the folder's tokenizer_config.json eos_token, and
    the text "\\n\\n" when there is none)."""

    path: str = ""
    eos_token: str = ""
    max_vocab: int = MAX_VOCAB


#: the class a classmethod of :class:`HFTokenizer` builds (``bpe``'s subclass builds itself)
_Loaded = TypeVar("_Loaded", bound="HFTokenizer")


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` plus the end-of-document marker the run packs with."""

    name = "hf"

    def __init__(self, backend: Any, eos_token: str, source: Path) -> None:
        backend.no_truncation()  # a tokenizer.json may carry truncation or padding: documents
        backend.no_padding()  # are packed whole, never cut or padded
        self.backend, self.eos_token, self.source = backend, eos_token, source
        self.vocab_size = max(backend.get_vocab(with_added_tokens=True).values()) + 1
        if eos_token:
            eos_id = backend.token_to_id(eos_token)
            if eos_id is None:
                raise ConfigError(
                    f"tokenizer.eos_token={eos_token!r} is not a token of {source}; name one "
                    f"of its special tokens, or '' to end documents with the text {SEPARATOR!r}"
                )
            self.marker = [eos_id]
        else:
            self.marker = backend.encode(SEPARATOR, add_special_tokens=False).ids
        content = backend.to_str() + "\0" + eos_token
        self.fingerprint = hashlib.sha256(content.encode()).hexdigest()[:16]

    @classmethod
    def max_vocab(cls, settings: dict[str, Any]) -> int:
        file = tokenizer_file(settings["path"])
        return checked_vocab(read_backend(file), file, settings.get("max_vocab", MAX_VOCAB))

    @classmethod
    def prepare(cls, settings: dict[str, Any], corpus: TextCorpus) -> HFTokenizer:
        file = tokenizer_file(settings["path"])
        eos = settings["eos_token"] or _configured_eos(file.parent)
        backend = read_backend(file)
        checked_vocab(backend, file, settings.get("max_vocab", MAX_VOCAB))
        return cls(backend, eos, file)

    @classmethod
    def load(cls: type[_Loaded], settings: dict[str, Any], runtime: Mapping[str, Any]) -> _Loaded:
        file = Path(runtime["path"])
        if not file.is_file():
            raise DataError(f"the run's tokenizer file {file} is gone; launch the run again")
        return cls(read_backend(file), runtime["eos_token"], file)

    def runtime(self) -> dict[str, Any]:
        return {"path": str(self.source), "eos_token": self.eos_token}

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        encodings = self.backend.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids + self.marker, dtype=np.int64) for e in encodings]

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        known = [i for i in ids if 0 <= i < self.vocab_size]
        return self.backend.decode(known, skip_special_tokens=True)

    def save(self, folder: Path) -> None:
        """tokenizer.json as the backend holds it; the source folder's tokenizer_config.json
        (and special_tokens_map.json) when it had one, else a PreTrainedTokenizerFast one; and
        its chat_template.jinja, where transformers keeps a chat template."""
        folder.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(folder / TOKENIZER_FILE))
        source = self.source.parent
        if not (source / CONFIG_FILE).is_file():
            write_config(folder, self.eos_token)
        for extra in (CONFIG_FILE, "special_tokens_map.json", CHAT_TEMPLATE_FILE):
            if (source / extra).is_file():
                shutil.copyfile(source / extra, folder / extra)


def checked_vocab(backend: Any, file: Path, limit: int) -> int:
    """The embedding rows ``backend``'s ids need (its largest id + 1), refused above ``limit``
    before a model is sized for them: a tokenizer.json of two million ids once grew a model
    until the host ran out of memory."""
    size = max(backend.get_vocab(with_added_tokens=True).values()) + 1
    if size > limit:
        raise ConfigError(
            f"tokenizer.path={file}: its ids run to {size - 1:,}, so the model would need "
            f"{size:,} embedding rows, more than tokenizer.max_vocab={limit:,}. Use a tokenizer "
            f"with fewer ids, or raise tokenizer.max_vocab if the model really needs them"
        )
    return size


def write_config(folder: Path, eos_token: str) -> None:
    """A tokenizer_config.json with which ``transformers`` loads tokenizer.json as it is
    (``clean_up_tokenization_spaces`` off, so its decode equals ours)."""
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "eos_token": eos_token or None,
    }
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")


def tokenizer_file(path: str) -> Path:
    """``tokenizer.path``: the tokenizer.json it names, or the one inside the folder."""
    if not path:
        raise ConfigError("tokenizer.path: required; a tokenizer.json or a folder holding one")
    given = Path(path).expanduser().resolve()  # workers may start elsewhere
    file = given / TOKENIZER_FILE if given.is_dir() else given
    if not file.is_file():
        what = f"{given} holds no {TOKENIZER_FILE}" if given.is_dir() else "no such file"
        raise ConfigError(
            f"tokenizer.path={path}: {what}. Give a local tokenizer.json or a folder holding one "
            f"(xirang never downloads a tokenizer)."
        )
    return file


def read_backend(file: Path) -> Any:
    """The parsed tokenizer.json; one ConfigError line when it cannot be read or parsed."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"tokenizer.path={file}: cannot be read ({exc})") from None
    except Exception as exc:  # the library raises its own exception type for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"tokenizer.path={file}: not a tokenizer.json the tokenizers library can parse "
            f"({first})"
        ) from None


def _configured_eos(folder: Path) -> str:
    """The eos_token a tokenizer_config.json beside the file names, or ''."""
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    eos = config.get("eos_token") if isinstance(config, dict) else None
    if isinstance(eos, dict):  # older files store an AddedToken's fields
        eos = eos.get("content")
    return eos if isinstance(eos, str) else ""
