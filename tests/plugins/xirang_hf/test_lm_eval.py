"""lm-eval itself (0.4.13 from PyPI, installed by :func:`tests.pypi.install`) on a model xirang
trained and exported, run as its users run it: ``lm_eval --model hf --model_args
pretrained=<export> --tasks <task> --apply_chat_template``, over a task defined here (a YAML
over a local jsonl file of conversations). Its loglikelihoods of the held-out replies are
xirang's own validation loss on them: both score each reply's tokens after its prompt, as the
run's chat template renders it. The tokenizer, the data and the weights are made here;
nothing is downloaded (the hub and datasets are offline)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_dirs, run_in, xirang_cli
from tests.pypi import install

pytestmark = pytest.mark.slow

LM_EVAL = "lm_eval==0.4.13"
#: what lm-eval imports that xirang's dev venv does not hold (sacrebleu at import, pytablewriter
#: for its results table), pinned; torch, transformers and datasets are the venv's
NEEDS = (
    "sacrebleu==2.6.0", "portalocker==4.4.2", "tabulate==0.10.0", "colorama==0.4.6",
    "lxml==6.2.1", "sqlitedict==2.1.0", "pytablewriter==1.2.1", "DataProperty==1.1.1",
    "mbstrdecoder==1.1.5", "pathvalidate==3.3.1", "tabledata==1.3.5", "tcolorpy==0.1.7",
    "typepy==2.0.0", "chardet==7.7.0", "pytz==2026.6",
)  # fmt: skip
END = "<|end|>"
#: a chat template whose prompt ends in a special token, so lm-eval's context (it moves a
#: trailing space into the scored continuation) splits where the run's reply starts
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
#: the task, over the held-out conversations: the user's message is the prompt, the reply and
#: the end of turn are scored
TASK = """\
task: xirang_replies
dataset_path: json
dataset_kwargs:
  data_files:
    test: {val}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{messages[0].content}}}}"
doc_to_target: "{{{{messages[1].content}}}}<|end|>"
metric_list:
  - metric: perplexity
"""


def conversation(i: int) -> str:
    messages = [
        {"role": "user", "content": f"What is {i} plus {i}?"},
        {"role": "assistant", "content": f"It is {2 * i}."},
    ]
    return json.dumps({"messages": messages}) + "\n"


def tokenizer_folder(folder: Path) -> None:
    """A byte-level BPE with the template's special tokens, saved by transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|user|>", "<|assistant|>", END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(
        [f"What is {i} plus {i}? It is {2 * i}." for i in range(100)], trainer
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=END)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict], Path]:
    """A chat run of xirang's Llama (8 held-out conversations, one evaluation batch of 8),
    exported ``--format hf`` and evaluated by lm-eval: (its summary, lm-eval's samples, the
    export)."""
    work = tmp_path_factory.mktemp("lm-eval")
    tokenizer_folder(work / "tokenizer")
    (work / "train.jsonl").write_text("".join(conversation(i) for i in range(64)))
    (work / "val.jsonl").write_text("".join(conversation(i) for i in range(100, 108)))
    done = run_in(
        work, "model=llama_tiny", "tokenizer=hf", "tokenizer.path=tokenizer", "data=chat",
        "data.path=train.jsonl", "data.val=val.jsonl", "data.seq_len=32",
        "trainer.global_batch=8", "trainer.eval_batches=1", "trainer.max_steps=20",
        "trainer.sample_tokens=0",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = run_dirs(work)
    exported = xirang_cli("ckpt", "export", "--format", "hf", str(run), "model", cwd=work)
    assert exported.returncode == 0, exported.stderr[-3000:]
    (work / "tasks").mkdir()
    (work / "tasks" / "replies.yaml").write_text(TASK.format(val=work / "val.jsonl"))
    folder = install(LM_EVAL, *NEEDS, package="lm_eval")
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(work / "hf")}
    lm_eval = subprocess.run(
        [str(folder / "bin" / "lm_eval"), "--model", "hf", "--model_args", "pretrained=model",
         "--tasks", "xirang_replies", "--include_path", "tasks", "--apply_chat_template",
         "--device", "cpu", "--log_samples", "--output_path", "results"],
        cwd=work, env={**os.environ, "PYTHONPATH": str(folder), **offline},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert lm_eval.returncode == 0, lm_eval.stdout[-2000:] + lm_eval.stderr[-3000:]
    [samples] = (work / "results").rglob("samples_xirang_replies_*.jsonl")
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    return json.loads((run / "summary.json").read_text()), records, work / "model"


def test_lm_evals_loglikelihoods_of_the_replies_are_xirangs_validation_loss(evaluated) -> None:
    """Each held-out conversation once in lm-eval's samples, its prompt rendered by the
    export's chat template; their nats over the reply tokens are the run's val_loss (its mean
    cross-entropy over the same tokens)."""
    from transformers import AutoTokenizer

    summary, samples, model = evaluated
    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    assert len(samples) == 8
    first = samples[0]["arguments"]["gen_args_0"]
    assert first["arg_0"] == "<|user|>What is 100 plus 100?<|end|><|assistant|>"
    assert first["arg_1"] == "It is 200.<|end|>"
    nats = -sum(float(s["resps"][0][0][0]) for s in samples)
    tokens = sum(len(tokenizer(s["target"], add_special_tokens=False).input_ids) for s in samples)
    assert nats / tokens == pytest.approx(summary["val_loss"], rel=1e-4)
