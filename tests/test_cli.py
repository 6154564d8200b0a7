"""The command line: `run` on the CPU end to end, `explain` output, clean failures on bad input.

Each case runs `python -m mqa_logits_mxfp4` in a subprocess: the CLI decides TRITON_INTERPRET
itself before the kernels are imported, which an in-process call could not show.
"""

import os
import subprocess
import sys

import pytest

from mqa_logits_mxfp4.models import MODELS


def cli(*args, timeout=120, env_drop=("TRITON_INTERPRET",)):
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    return subprocess.run([sys.executable, "-m", "mqa_logits_mxfp4", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_run_on_cpu_passes():
    res = cli("run", "--device", "cpu", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "setting TRITON_INTERPRET=1" in res.stderr
    for step in ("decode", "prefill"):
        assert f"  {step}: PASS" in res.stdout
    assert "run: PASS (2 steps" in res.stdout
    assert "FAIL" not in res.stdout
    assert "backend=triton" in res.stdout


def test_explain_names_backend_instance_and_source():
    res = cli("explain", "--device", "cpu", "--max-seqs", "4", "--max-qlen", "2", "--max-seq-len", "4096")
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "cpu/1: H64 D128 page 64x1, rows<=8 seqs<=4 qlen<=2 seq_len<=4096" in out
    assert "pick: backend=triton instance=" in out
    assert "source: " in out
    assert "opus: " in out  # rejected backends are listed with their reasons


@pytest.mark.parametrize("model", sorted(MODELS))
def test_explain_model_presets(model):
    res = cli("explain", "--device", "cpu", "--model", model, "--max-seqs", "2", "--max-qlen", "4")
    assert res.returncode == 0, res.stdout + res.stderr
    preset = MODELS[model]
    expect = f"H{preset.heads} D{preset.head_dim} page {preset.page_size}x{preset.pages_per_block}"
    assert expect in res.stdout
    assert ("gather" in res.stdout.splitlines()[0]) == preset.gather
    assert f"seq_len<={preset.max_seq_len}" in res.stdout


def test_explain_batch_invariant():
    res = cli("explain", "--device", "cpu", "--batch-invariant")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "seq_len<=8192, batch-invariant" in res.stdout.splitlines()[0]
    assert "guarantee: batch_invariant: canonical instances only" in res.stdout
    assert "is not canonical (docs/numerics.md)" in res.stdout  # the excluded scaled instances


def test_explain_option_overrides_preset():
    res = cli("explain", "--device", "cpu", "--model", "deepseek_v4_1_candidate", "--no-gather",
              "--max-seq-len", "1000")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "H32 D128 page 8x1, rows<=1 seqs<=1 qlen<=1 seq_len<=1000" in res.stdout


@pytest.mark.parametrize("args, code, text", [
    (("bogus",), 2, "invalid choice: 'bogus'"),
    (("explain", "--heads", "sixty"), 2, "invalid int value: 'sixty'"),
    (("explain", "--model", "deepseek_v5"), 2, "invalid choice: 'deepseek_v5'"),
    (("run", "--device", "tpu"), 2, "--device"),
    (("explain", "--device", "cpu", "--heads", "0"), 1, "heads must be a positive int; got 0"),
    (("explain", "--device", "cpu", "--heads", "48"), 1, "needs heads in (16, 32, 64, 128); got 48"),
])
def test_bad_arguments_fail_cleanly(args, code, text):
    res = cli(*args)
    assert res.returncode == code, res.stdout + res.stderr
    assert text in res.stderr
    assert "Traceback" not in res.stderr


def test_cuda_device_without_gpu_is_refused():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: --device cuda is valid here")
    res = cli("explain", "--device", "cuda")
    assert res.returncode == 2
    assert "torch sees no CUDA/ROCm device" in res.stderr
    assert "Traceback" not in res.stderr


def test_version():
    import mqa_logits_mxfp4 as mx
    res = cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"mqa-logits-mxfp4 {mx.__version__}"


@pytest.mark.parametrize("args", [("build", "--check"), ("build",)])
def test_build_where_nothing_can_be_built_says_so_and_exits_2(args):
    import torch
    if torch.version.cuda or getattr(torch.version, "hip", None):
        pytest.skip("a CUDA / ROCm torch: the opus extension can be built here")
    res = cli(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "nothing can be built on this machine: torch" in res.stderr and "is CPU-only" in res.stderr
    assert "Traceback" not in res.stderr
    assert "2: nothing can be built on this machine" in " ".join(cli("build", "--help").stdout.split())
