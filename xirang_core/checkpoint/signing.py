"""An optional per-pool key that signs every checkpoint manifest (HMAC-SHA256).

A manifest's checksum catches torn writes, but whoever can write to the checkpoint folder can
recompute it. With a key set (``XIRANG_CHECKPOINT_KEY``, or ``XIRANG_CHECKPOINT_KEY_FILE``
naming a file only its owner can read), every save signs the manifest, and since the manifest
holds the digest of every chunk, the signature covers every byte of the checkpoint. ``xirang
ckpt verify``, export and resume then refuse a checkpoint that is unsigned or signed by another
key, naming the setting that asked for it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from xirang_core.errors import ConfigError

KEY_ENV = "XIRANG_CHECKPOINT_KEY"
KEY_FILE_ENV = "XIRANG_CHECKPOINT_KEY_FILE"
MIN_KEY_BYTES = 16


@dataclass(frozen=True)
class SigningKey:
    """The secret, and the setting it came from (named in every refusal)."""

    secret: bytes
    setting: str

    def sign(self, body: bytes) -> str:
        return hmac.new(self.secret, body, hashlib.sha256).hexdigest()

    def check(self, body: bytes, signature: str | None, where: str) -> None:
        """RefusedCheckpoint unless ``signature`` is this key's over ``body``."""
        from xirang_core.checkpoint.chunks import RefusedCheckpoint  # torch: only when checking

        if not signature:
            raise RefusedCheckpoint(
                f"{where}: the checkpoint is not signed, and {self.setting} is set, so only "
                f"checkpoints signed with that key load (unset it to accept unsigned ones)"
            )
        if not hmac.compare_digest(signature, self.sign(body)):
            raise RefusedCheckpoint(
                f"{where}: the checkpoint is signed by another key than {self.setting}: "
                f"written by another pool, or edited since it was saved; refused"
            )


def signing_key() -> SigningKey | None:
    """The key the environment sets, or None (checkpoints unsigned, and not checked)."""
    value = os.environ.get(KEY_ENV, "")
    if value:
        return SigningKey(_long_enough(value.encode(), KEY_ENV), KEY_ENV)
    path = os.environ.get(KEY_FILE_ENV, "")
    if path:
        setting = f"{KEY_FILE_ENV}={path}"
        return SigningKey(_long_enough(read_key_file(Path(path), setting), setting), setting)
    return None


def read_key_file(path: Path, setting: str) -> bytes:
    """The key in ``path``, refused when anyone but its owner may read or write it."""
    try:
        mode = path.stat().st_mode
        key = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read the key file ({exc.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"{setting}: the key file has mode {stat.S_IMODE(mode):o}, so others may read it; "
            f"it must be 600 (chmod 600 {path})"
        )
    return key


def _long_enough(key: bytes, setting: str) -> bytes:
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"{setting}: the checkpoint key has {len(key)} bytes; it needs at least "
            f"{MIN_KEY_BYTES} (e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`)"
        )
    return key
