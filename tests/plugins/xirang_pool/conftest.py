"""A real pool service over HTTP on loopback for ``scheduler=pool`` runs: ``served_pool(cluster)``
writes the cluster file, serves it and gives nlp a token; the environment a run needs to submit."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from xirang_service.pool.client import PoolClient
from xirang_service.pool.rest import serve
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore

Served = tuple[PoolService, dict[str, str]]


@pytest.fixture
def served_pool(tmp_path: Path) -> Callable[[dict[str, Any]], Any]:
    @contextmanager
    def serving(cluster: dict[str, Any]) -> Iterator[Served]:
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(cluster))
        service = PoolService(PoolStore(tmp_path / "pool.db"), path, "priority", "op-token")
        server = serve(service, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            token = PoolClient(url, "op-token").call("PUT", "/v1/projects/nlp", {})["token"]
            yield service, {"XIRANG_POOL_URL": url, "XIRANG_POOL_TOKEN": token}
        finally:
            server.shutdown()

    return serving
