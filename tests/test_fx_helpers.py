"""Shared checks for the jitorch.fx tests: every trace is linted and run three ways (eager, Interpreter, module)."""
from __future__ import annotations

import numpy as np

import jitorch
from jitorch import fx


def to_np(value):
    if isinstance(value, (tuple, list)):
        return [to_np(v) for v in value]
    return value.detach().numpy() if isinstance(value, jitorch.Tensor) else np.asarray(value)


def assert_close(actual, expected, atol=1e-5):
    a, e = to_np(actual), to_np(expected)
    if isinstance(e, list):
        assert len(a) == len(e)
        for x, y in zip(a, e):
            np.testing.assert_allclose(x, y, atol=atol, rtol=1e-5)
    else:
        np.testing.assert_allclose(a, e, atol=atol, rtol=1e-5)


def check_traced(root, *inputs, gm=None, concrete_args=None):
    """Trace ``root`` (unless ``gm`` is given), lint, and compare Interpreter and GraphModule with eager."""
    gm = gm if gm is not None else fx.symbolic_trace(root, concrete_args=concrete_args)
    gm.graph.lint()
    expected = root(*inputs)
    assert_close(fx.Interpreter(gm).run(*inputs), expected)
    assert_close(gm(*inputs), expected)
    return gm


def digits_cnn(T):
    """The model of examples/train_digits.py (kept identical; the example imports scikit-learn, tests do not)."""
    nn = T.nn

    class DigitsCNN(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            )
            self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 2 * 2, num_classes))

        def forward(self, x):
            return self.classifier(self.features(x))
    return DigitsCNN
