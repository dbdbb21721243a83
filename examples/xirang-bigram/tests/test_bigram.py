"""The bigram family through xirang's test kit (the ``xirang`` fixture)."""

from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1]


@pytest.fixture
def kit(xirang):
    xirang.use("xirang_bigram", path=PACKAGE)  # from this source tree, not installed
    return xirang


def test_the_family_meets_the_model_protocol(kit):
    kit.check("model", "bigram")


def test_its_option_composes_with_the_tokenizers_vocabulary(kit):
    config = kit.compose("model=bigram_tiny", "tokenizer=bytes")
    assert config["model"] == {
        "family": "bigram",
        "name": "bigram_tiny",
        "dim": 32,
        "vocab_size": 256,
    }


def test_an_unknown_setting_is_refused(kit):
    from xirang import ConfigError

    with pytest.raises(ConfigError, match=r"model\.depth: no such setting"):
        kit.compose("model=bigram_tiny", "+model.depth=2")


def test_a_few_steps_train_and_the_loss_falls(kit):
    run = kit.train("model=bigram_tiny", "trainer.max_steps=8", "optim.lr=1e-2")
    assert run.summary["steps"] == 8 and run.summary["model"] == "bigram_tiny"
    assert run.metrics[-1]["loss"] < run.metrics[0]["loss"]
