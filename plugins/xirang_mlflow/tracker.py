"""An MLflow run through ``MlflowClient`` (no global fluent state, so it is safe on the
tracking thread): parameters once, metrics per step, artifacts and status at the end."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xirang import xirang_home
from xirang.tracking import flatten

#: MLflow's limits: parameters per batch call, characters of a parameter's value
PARAMS_PER_CALL, PARAM_CHARS = 100, 6000
#: the run's files logged as artifacts at its end, where present
ARTIFACTS = ("summary.json", "loss_curve.png", "config.yaml")


@dataclass
class MlflowConfig:
    """tracking_uri: empty = ``sqlite:///$XIRANG_HOME/mlflow/mlflow.db`` (artifacts beside it);
        a server such as ``http://mlflow.internal:5000``, or any URI MLflow accepts.
    experiment: the MLflow experiment; empty = the run's ``project``.
    timeout_s / retries: per request to a server, so one that is down costs seconds, not
        minutes, before the tracker warns and turns itself off."""

    tracking_uri: str = ""
    experiment: str = ""
    timeout_s: float = 10.0
    retries: int = 1

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """A password in the URI would be written into the run's config.yaml and the tracker's
        own parameters: refuse it, naming MLflow's credential variables (the secret is left out
        of the message)."""
        from urllib.parse import urlsplit

        from xirang import ConfigError

        parts = urlsplit(settings.get("tracking_uri") or "")
        if parts.username or parts.password:
            raise ConfigError(
                f"tracker.mlflow.tracking_uri: credentials in the URI "
                f"({parts.scheme}://<user>:<secret>@{parts.hostname}...) would be written into "
                "the run's config. Give the URI without them and set MLFLOW_TRACKING_USERNAME "
                "and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the environment."
            )
        return settings


class MlflowTracker:
    def __init__(
        self,
        tracking_uri: str = "",
        experiment: str = "",
        timeout_s: float = 10.0,
        retries: int = 1,
    ) -> None:
        self.uri, self.experiment = tracking_uri, experiment
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(int(max(timeout_s, 1)))
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(retries)
        self.client: Any = None
        self.run_id = ""

    def start(self, run_dir: Path, config: Mapping[str, Any], run_id: str | None) -> str:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri or default_uri())
        if run_id:  # a restart or a resume in the same run directory: the same MLflow run
            self.client.update_run(run_id, status="RUNNING")
            self.run_id = run_id
            return run_id
        experiment = self.experiment or str(config.get("project") or "default")
        tags = {"xirang.run_dir": str(run_dir), "xirang.model": config["model"]["name"]}
        run = self.client.create_run(
            self._experiment_id(experiment), run_name=run_dir.name, tags=tags
        )
        self.run_id = run.info.run_id
        params = [Param(k, str(v)[:PARAM_CHARS]) for k, v in flatten(config).items()]
        for i in range(0, len(params), PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=params[i : i + PARAMS_PER_CALL])
        return self.run_id

    def _experiment_id(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        local = not self.uri  # the default store keeps artifacts beside it, not in ./mlruns
        location = (default_root() / "artifacts").as_uri() if local else None
        return self.client.create_experiment(name, artifact_location=location)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, value, now, step) for key, value in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def finish(self, summary: Mapping[str, Any] | None, run_dir: Path) -> None:
        if summary is None:
            self.client.set_terminated(self.run_id, status="FAILED")
            return
        for name in ARTIFACTS:
            if (run_dir / name).exists():
                self.client.log_artifact(self.run_id, str(run_dir / name))
        self.client.set_terminated(self.run_id, status="FINISHED")


def default_root() -> Path:
    return xirang_home() / "mlflow"


def default_uri() -> str:
    """The local store: one SQLite file for every run under this XIRANG_HOME."""
    db = default_root() / "mlflow.db"
    if not db.exists():
        create_store(db)
    return f"sqlite:///{db}"


def create_store(db: Path) -> None:
    """MLflow's tables, built in a file of this process's own and then linked into place: a
    worker killed while MLflow migrates a new store (seconds, on the first run) leaves no
    half-built store behind, and a store another process published first is kept."""
    from mlflow.tracking import MlflowClient

    db.parent.mkdir(parents=True, exist_ok=True)
    building = db.with_name(f".{db.name}.{os.getpid()}.building")
    building.unlink(missing_ok=True)
    MlflowClient(tracking_uri=f"sqlite:///{building}").search_experiments()
    try:
        os.link(building, db)
    except FileExistsError:
        pass
    finally:
        building.unlink()
