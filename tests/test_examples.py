"""Smoke tests of the example scripts: each runs as a user would run it (a subprocess, on jitorch), in quick mode.

They check that training works end to end (the loss falls, accuracy beats chance), not how fast: timing never goes in
a test. The full-length accuracy target of ``train_digits.py`` (>= 97%) is the script's own exit status.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(script, *args, timeout=120):
    """Run ``examples/<script>`` with jitorch, single-threaded BLAS; returns its stdout (fails on a non-zero exit)."""
    # Tiny models lose more to BLAS threads fighting each other (and the other test workers) than they gain.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                            timeout=timeout, env=env, cwd=EXAMPLES.parent)
    assert result.returncode == 0, f"{script} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_train_digits_quick():
    pytest.importorskip("sklearn")
    out = run_example("train_digits.py", "--quick")
    losses = [float(v) for v in re.findall(r"train loss ([\d.]+)", out)]
    accuracy = float(re.search(r"final test accuracy ([\d.]+)", out).group(1))
    assert len(losses) == 3, out
    assert losses[-1] < losses[0], out
    assert accuracy > 0.6, out  # chance is 0.1; 3 epochs on 600 images reach 0.84-0.91 (seeds 0-3, both libraries)


@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_char_gpt_quick(attention):
    out = run_example("char_gpt.py", "--steps", "30", "--sample-chars", "20", "--attention", attention)
    losses = [float(v) for v in re.findall(r"step +\d+ +loss ([\d.]+)", out)]
    assert len(losses) >= 2, out
    assert losses[0] == pytest.approx(4.19, abs=0.1), out  # near-uniform logits at init: log(66 characters)
    assert losses[-1] < losses[0] - 0.5, out
    assert "--- sample ---" in out
