"""One rank of a data-only run for the S3 tests: reads training batches step by step and logs a
hash of each, then the bytes it fetched from the origin (two of them share one cache folder).

    python -m tests.data.stream_rank CONFIG.json RANK WORLD FIRST LAST OUT PAUSE_S
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from xirang_data.training import run_batches


def main(config: str, rank: str, world: str, first: str, last: str, out: str, pause: str) -> None:
    train, _ = run_batches(json.loads(Path(config).read_text()), int(rank), int(world), 2, 1)
    with open(out, "a") as log:
        for step in range(int(first), int(last) + 1):
            x, _ = train.get(step)
            log.write(f"{step} {digest(x)}\n")
            log.flush()
            time.sleep(float(pause))
        fetched = sum(s.source.fetcher.origin_bytes for s in train.sources)
        log.write(f"origin_bytes {fetched}\n")
    train.close()


def digest(batch) -> str:
    return hashlib.sha256(batch.numpy().tobytes()).hexdigest()[:16]


if __name__ == "__main__":
    main(*sys.argv[1:])
