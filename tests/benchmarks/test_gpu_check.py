"""benchmarks/gpu_check.py: on a machine without a usable GPU it says which parts need one and
prints its last line with n/a figures; with figures, the last line carries them as documented;
the datasheet table picks the right device when one name contains another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import gpu_check  # noqa: E402

NA_LINE = (
    "gpu_mfu_bf16=n/a calib_vs_datasheet=n/a ckpt_restore_bitwise=n/a fsdp=n/a ddp=n/a "
    "power_w=n/a compile=n/a"
)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the path of a machine with no GPU")
def test_without_a_gpu_it_names_the_parts_that_need_one(tmp_path: Path) -> None:
    env = {**os.environ, "XIRANG_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH / "gpu_check.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == NA_LINE
    assert lines[0].startswith("== detection: ") and '"usable": false' in lines[0]
    needs = next(line for line in lines if line.startswith("needs a GPU"))
    assert all(part in needs for part in gpu_check.GPU_PARTS)


def test_last_line_carries_the_figures() -> None:
    results = {
        "mfu": {"ok": True, "mfu": 0.4123},
        "calibration": {"ok": True, "vs_datasheet": 0.7},
        "checkpoint": {"ok": True, "bitwise": True},
        "fsdp": {"ok": True},
        "ddp": {"ok": False},
        "power": {"ok": True, "mean_w": 412.25},
        "default_run": {"ok": True},
    }
    assert gpu_check.last_line(results) == (
        "gpu_mfu_bf16=0.412 calib_vs_datasheet=0.700 ckpt_restore_bitwise=yes fsdp=ok "
        "ddp=fail power_w=412.2 compile=ok"
    )


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H200", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA GH200 480GB", 989.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A10", 125.0),
    ],
)
def test_datasheet_peak_of_each_device(name: str, tflops: float) -> None:
    assert gpu_check.datasheet(name)[0] == tflops


def test_an_unknown_device_has_no_datasheet_figure() -> None:
    assert gpu_check.datasheet("Tesla T4") is None


@pytest.mark.parametrize("part", ["calibration", "mfu", "checkpoint"])
def test_a_part_runs_in_the_cpu_rehearsal(part: str, tmp_path: Path) -> None:
    """Each part's own code runs (on the CPU, tiny): the first GPU machine found the MFU part
    calling llm_throughput's ``best_settings`` with an outdated signature."""
    env = {**os.environ, "XIRANG_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH / "gpu_check.py"), "--part", part, "--rehearse"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    figure = {"calibration": "bf16_tflops", "mfu": "tokens_per_s", "checkpoint": "stall_s"}[part]
    assert result[figure] > 0
    if part == "checkpoint":
        assert result["bitwise"] is True


def test_the_fetch_downloads_for_the_images_python_and_builds_xirang_offline(
    tmp_path: Path,
) -> None:
    """The wheels an air-gapped image lacks: the downloads target the image's Python (not this
    machine's) as pure wheels; xirang's own wheel builds here without an index."""
    import gpu_wheels

    download, antlr, xirang = gpu_wheels.fetch_commands(tmp_path, "3.12")
    assert download[3:5] == ["download", "--no-deps"] and "--only-binary=:all:" in download
    assert download[download.index("--python-version") + 1] == "3.12"
    assert {arg.split("==")[0] for arg in download[-3:]} == {
        "hydra-core",
        "omegaconf",
        "nvidia-ml-py",
    }
    assert antlr[3] == "wheel" and antlr[-1].startswith("antlr4-python3-runtime==")
    assert subprocess.run(xirang, capture_output=True).returncode == 0
    assert [p.name.split("-")[0] for p in tmp_path.glob("*.whl")] == ["xirang"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the path of a machine with no GPU")
def test_the_check_runs_from_installed_wheels_and_writes_its_figures(tmp_path: Path) -> None:
    """``--wheels``: installed without an index and used (not the checkout's install);
    ``--out``: the figures land in summary.json; the site it installed into is removed after."""
    import gpu_wheels

    wheels, out = tmp_path / "whl", tmp_path / "out"
    subprocess.run(gpu_wheels.xirang_wheel_command(wheels), check=True, capture_output=True)
    env = {**os.environ, "XIRANG_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path)}
    command = [sys.executable, str(BENCH / "gpu_check.py"), "--wheels", str(wheels)]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["last_line"] == NA_LINE
    site = Path(summary["detection"]["preflight"]["xirang"])
    assert site.name.startswith("xirang-gpu-site-") and site.parent == tmp_path
    assert not site.exists()


@pytest.mark.slow
def test_the_whole_rehearsal_runs_every_part_and_writes_the_out_folder(tmp_path: Path) -> None:
    """The proof's own command on the CPU (``--rehearse``), as CI runs it: every part runs in
    its order within the budget, FSDP2 wraps for real on one rank, and the output folder holds
    the figures and each part's log (at most eight files, two folders deep)."""
    out = tmp_path / "out"
    env = {**os.environ, "XIRANG_HOME": str(tmp_path / "home"), "OUT": str(out)}
    command = [sys.executable, str(BENCH / "gpu_check.py"), "--rehearse"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    parts = [line.split(":")[0][3:] for line in done.stdout.splitlines() if line.startswith("==")]
    assert parts[1:-1] == list(gpu_check.GPU_PARTS)
    assert summary["last_line"] == done.stdout.strip().splitlines()[-1]
    for part in ("calibration", "checkpoint", "default_run", "ddp", "fsdp"):
        assert summary[part]["ok"], (part, summary[part])
    assert summary["mfu"]["tokens_per_s"] > 0
    assert summary["fsdp"]["parameter_type"]["types"] == ["DTensor"]
    files = [path for path in out.rglob("*") if path.is_file()]
    assert len(files) <= 8 and all(len(p.relative_to(out).parts) <= 2 for p in files)
    assert (out / "parts" / "default_run.log").read_text().count("trainer.compile=true") >= 1
