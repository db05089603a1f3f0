"""Fused row kernels over many row lengths, run in a child process with a time limit: generated code that never
ends (an LLVM loop-hint bug once turned relu -> softmax over 8 classes into an endless loop) fails here instead of
hanging the suite, and an LLVM assertion abort fails instead of killing it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import math
    import jitorch as torch
    import jitorch.nn.functional as F
    torch.manual_seed(0)
    def gelu(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    fns = {
        "softmax": lambda z: z.softmax(-1), "relu_softmax": lambda z: z.relu().softmax(-1),
        "relu_log_softmax": lambda z: z.relu().log_softmax(-1), "layer_norm": lambda z: F.layer_norm(z, z.shape[-1:]),
        "relu_layer_norm": lambda z: F.layer_norm(z.relu(), z.shape[-1:]), "relu_sum": lambda z: z.relu().sum(-1),
        "exp_amax": lambda z: z.exp().amax(-1), "var_mean": lambda z: z.var(-1) + z.mean(-1), "gelu": gelu,
    }
    for n in (1, 7, 8, 9, 16, 17, 64, 65, 1000, 4097):
        z = torch.randn(5, n)
        for name, f in fns.items():
            got, expected = torch.compile(f)(z), f(z)
            assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5, equal_nan=True), (name, n)
        z.requires_grad_(True)
        loss = torch.compile(lambda t: (t.relu().softmax(-1) * 3).sum())(z)
        loss.backward()
        fused_grad, z.grad = z.grad, None
        (z.relu().softmax(-1) * 3).sum().backward()
        assert torch.allclose(fused_grad, z.grad, atol=1e-5), ("relu_softmax backward", n)
    print("ok")
''')


def test_row_kernels_finish_and_match_eager_for_many_row_lengths(tmp_path):
    env_cache = {"JITORCH_CACHE_DIR": str(tmp_path)}  # fresh compiles: a cached kernel would skip LLVM
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240,
                            env={**os.environ, **env_cache})
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr[-3000:]}"
    assert result.stdout.strip().endswith("ok")
