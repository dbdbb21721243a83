"""The run's contract (#48): ``validate()`` hands every later stage a frozen, typed RunConfig;
what a run learns after validation derives a new config (and typed records) instead of
writing into the one it was given, and config.yaml reads the same as the plain dict did."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from xirang.specs import FrozenConfigError, RunConfig, Runtime, thaw
from xirang_core.config import compose
from xirang_core.contract import OptimConfig, ProfileConfig, TrainerConfig
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry
from xirang_core.run import compose_config
from xirang_core.train import worker
from xirang_core.train.runconfig import read_config, worker_config, write_config

SMALL = ["tokenizer=bytes", "trainer.max_steps=4", "trainer.global_batch=8"]


@pytest.fixture(scope="module")
def config() -> RunConfig:
    return compose(SMALL, get_registry())


@pytest.fixture(scope="module")
def launched() -> RunConfig:
    """The config a launch writes for its workers (runtime resolved, data pinned)."""
    return compose_config(SMALL)


def test_a_validated_config_refuses_every_write_nested_too(config: RunConfig) -> None:
    writes = [
        lambda: config.__setitem__("seed", 1),
        lambda: config.pop("trainer"),
        lambda: config.setdefault("runtime", {}),
        lambda: config.update(seed=1),
        lambda: config["trainer"].__setitem__("max_steps", 1),
        lambda: config["data"].update(snapshot="x"),
        lambda: config["trainer"]["profile"]["steps"].append(1),
    ]
    for write in writes:
        with pytest.raises(FrozenConfigError, match="read-only after validation"):
            write()
    with pytest.raises(FrozenConfigError):
        del config["model"]
    assert config["trainer"]["max_steps"] == 4  # nothing changed


def test_core_sections_read_typed_and_the_mapping_reads_as_before(config: RunConfig) -> None:
    assert isinstance(config.trainer, TrainerConfig)
    assert config.trainer.max_steps == config["trainer"]["max_steps"] == 4
    assert config.trainer.profile == ProfileConfig(**config["trainer"]["profile"])
    assert isinstance(config.optim, OptimConfig) and config.optim.lr == config["optim"]["lr"]
    assert config.checkpoint.resume == config["checkpoint"]["resume"]
    assert config.sweep.objective == config["sweep"]["objective"]
    with pytest.raises(AttributeError):  # a typed section is frozen as well
        config.trainer.max_steps = 2  # type: ignore[misc]


def test_replace_derives_a_new_config_and_leaves_the_old_one(config: RunConfig) -> None:
    derived = config.replace(device={"name": "cpu"}, runtime={"devices": 1})
    assert isinstance(derived, RunConfig) and derived["runtime"] == {"devices": 1}
    assert "runtime" not in config and derived["trainer"] == config["trainer"]
    with pytest.raises(FrozenConfigError):
        derived["runtime"]["devices"] = 2


#: settings a user sets on the command line, each with values that validate
OVERRIDES = st.fixed_dictionaries(
    {
        "trainer.max_steps": st.integers(1, 10_000),
        "optim.lr": st.floats(0, 1, allow_nan=False),
        "seed": st.integers(0, 2**31 - 1),
        "trainer.profile.steps": st.sampled_from(["[]", "[1,1]"]),
        "checkpoint.resume": st.sampled_from(["auto", "never"]),
    }
)


#: each example composes a config (about a second): no shrinking, which would compose hundreds
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)


@settings(max_examples=8, deadline=None, phases=PHASES, suppress_health_check=list(HealthCheck))
@given(given_overrides=OVERRIDES)
def test_a_validated_config_round_trips_through_pickle_and_config_yaml(
    given_overrides: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> None:
    overrides = [*SMALL, *(f"{k}={v}" for k, v in given_overrides.items())]
    config = compose(overrides, get_registry())
    again = pickle.loads(pickle.dumps(config))
    assert type(again) is RunConfig and again == config
    with pytest.raises(FrozenConfigError):  # a spawned worker's copy is read-only too
        again["trainer"]["max_steps"] = 1
    run_dir = tmp_path_factory.mktemp("run")
    write_config(config, run_dir)
    assert read_config(run_dir) == config == thaw(config)
    text = (run_dir / "config.yaml").read_text()
    assert text == yaml.safe_dump(thaw(config), sort_keys=False)  # as the plain dict wrote it


def test_a_runs_config_yaml_is_the_composed_config_plus_what_the_launch_learned(
    tmp_path: Path,
) -> None:
    composed = compose(SMALL, get_registry())
    config = compose_config(SMALL)
    write_config(config, tmp_path)
    written = yaml.safe_load((tmp_path / "config.yaml").read_text())
    runtime = written.pop("runtime")
    device_facts = list(Runtime.__dataclass_fields__)
    assert list(runtime) == [*device_facts, "tokenizer", "tokens"]
    assert written.pop("data") == {**composed["data"], **written_pins(config)}
    assert written["device"] == {"name": runtime["device_type"]}  # device=auto, resolved
    assert {k: v for k, v in written.items() if k != "device"} == {
        k: v for k, v in thaw(composed).items() if k not in ("device", "data")
    }
    assert "runtime" not in composed  # the composed config itself was never written into


def written_pins(config: RunConfig) -> dict[str, object]:
    """What the launch pinned into the ``data`` section (the snapshot and what names it)."""
    pinned = config["data"]
    assert pinned["snapshot"]
    return {k: pinned[k] for k in ("uri", "snapshot", "val_fraction")}


def test_a_worker_reads_config_yaml_back_as_the_frozen_run_config(
    launched: RunConfig, tmp_path: Path
) -> None:
    write_config(launched, tmp_path)
    read = worker_config(tmp_path, get_registry())
    assert type(read) is RunConfig and read == launched
    assert read.trainer == launched.trainer  # typed as the launch's
    with pytest.raises(FrozenConfigError):
        read["trainer"]["max_steps"] = 1


#: a config.yaml edited by hand (or written by another version), and what its error names
BAD_CONFIGS = {
    "no section": (lambda c: c.pop("trainer"), "no trainer section; a run's config holds"),
    "a misspelt key": (
        lambda c: c["trainer"].update(max_stpes=3),
        "trainer.max_stpes: no such setting. Did you mean max_steps?",
    ),
    "a wrong type": (lambda c: c["optim"].update(lr="fast"), "optim.lr: Value 'fast'"),
    "an unknown option": (
        lambda c: c["parallel"].update(name="nope"),
        "unknown parallel 'nope'. Valid parallel names: ",
    ),
    "a plugin's misspelt key": (
        lambda c: c["storage"].update(roots="/x"),
        "storage.roots: no such setting. Did you mean root?",
    ),
    "no runtime fact": (
        lambda c: c["runtime"].pop("collective_backend"),
        "runtime.collective_backend: missing; the launch records",
    ),
}


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_a_worker_handed_a_bad_config_yaml_fails_at_start_naming_what_is_wrong(
    case: str, launched: RunConfig, tmp_path: Path
) -> None:
    edit, named = BAD_CONFIGS[case]
    written = thaw(launched)
    edit(written)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(written, sort_keys=False))
    with pytest.raises(ConfigError) as caught:  # not a KeyError deep in the worker
        worker.main(str(tmp_path))
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'config.yaml'}: ") and named in message
    assert "\n" not in message  # one line
    assert not (tmp_path / "segments.jsonl").exists()  # it stopped before training


#: a plugin's section given a wrong key or value, and what the error names: the key, what is
#: valid, the option and the plugin whose registered schema refused it
BAD_PLUGIN_SETTINGS = {
    "a wrong type": (
        ["data.seq_len=abc"],
        "data.seq_len: Value 'abc' of type 'str' could not be converted to Integer",
        "(data=stdlib: settings of plugin data, schema xirang_data.dataset:DataSettings)",
    ),
    "a misspelt key": (
        ["+data.seq_lenn=64"],
        "data.seq_lenn: no such setting. Did you mean seq_len? Valid keys of data: ",
        "(data=stdlib: settings of plugin data, schema xirang_data.dataset:DataSettings)",
    ),
    "another option's schema": (
        ["data=chat", "data.path=talks.jsonl", "data.shuffle=maybe"],
        "data.shuffle: Value 'maybe' is not a valid bool",
        "(data=chat: settings of plugin data, schema xirang_data.chat_settings:ChatSettings)",
    ),
    "a family's": (
        ["+model.n_layr=2"],
        "model.n_layr: no such setting. Did you mean n_layers?",
        "(model.family=llama: settings of plugin llama, schema xirang_llama.config:LlamaConfig)",
    ),
}


@pytest.mark.parametrize("case", BAD_PLUGIN_SETTINGS)
def test_a_plugin_section_is_checked_by_the_schema_its_plugin_registered(case: str) -> None:
    overrides, named, plugin = BAD_PLUGIN_SETTINGS[case]
    with pytest.raises(ConfigError) as caught:  # when composed, before anything starts
        compose([*SMALL, *overrides], get_registry())
    message = str(caught.value)
    assert named in message and message.endswith(plugin) and "\n" not in message


def test_the_data_section_reads_typed_through_its_plugins_schema(config: RunConfig) -> None:
    from xirang_data.dataset import DataSettings

    data = config.section(DataSettings, "data")
    assert isinstance(data, DataSettings) and data.seq_len == config["data"]["seq_len"]
    assert compose([*SMALL, "data.val=0.05"], get_registry())["data"]["val"] == "0.05"
