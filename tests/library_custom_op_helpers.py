"""Helpers of the ``jitorch.library`` tests: the custom op definitions both libraries build, and comparisons."""
import numpy as np
import torch

import jitorch


LIBS = (jitorch, torch)


def _np(t):
    return t if isinstance(t, np.ndarray) else t.detach().cpu().numpy()


def _close(a, b, atol=1e-6):
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=atol)


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the outcome compared
        return type(e), str(e)
    raise AssertionError("no error raised")


def _numpy_sin(lib, ns):
    """torch's documentation example: a NumPy kernel, a fake kernel and a backward formula."""
    @lib.library.custom_op(f"{ns}::numpy_sin", mutates_args=())
    def numpy_sin(x: lib.Tensor) -> lib.Tensor:
        return lib.from_numpy(np.sin(x.numpy()))

    @numpy_sin.register_fake
    def _(x):
        return lib.empty_like(x)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    numpy_sin.register_autograd(backward, setup_context=setup_context)
    return numpy_sin


# -- mutation ---------------------------------------------------------------------------------------------------------
def _mutating(lib, ns):
    @lib.library.custom_op(f"{ns}::scale_", mutates_args={"x"})
    def scale_(x: lib.Tensor, factor: float) -> None:
        x.mul_(factor)

    @lib.library.custom_op(f"{ns}::accumulate", mutates_args={"acc"})
    def accumulate(acc: lib.Tensor, x: lib.Tensor) -> lib.Tensor:
        acc.add_(x)
        return x * 2

    return scale_, accumulate
