"""Helpers of the ``autograd.Function`` tests: one factory per Function, so jitorch and torch run the same source."""
import numpy as np
import torch

import jitorch

LIBS = (jitorch, torch)


def _np(t):
    return None if t is None else np.asarray(t.detach().tolist(), dtype=np.float64)


def _close(a, b):
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-7)


def _leaf(lib, values, dtype=None):
    return lib.tensor(values, dtype=dtype or lib.float32, requires_grad=True)


# -- Function factories (one source for both libraries) ------------------------------------------------------------

def make_exp(lib):
    class Exp(lib.autograd.Function):
        """Saves its own output, like ExpBackward0."""

        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    return Exp


def make_cube(lib):
    class Cube(lib.autograd.Function):
        """Its backward is made of differentiable ops, so it supports double backward."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    return Cube


def make_scale(lib):
    class Scale(lib.autograd.Function):
        """Non-tensor arguments are kept on ctx; their gradient slots are None."""

        @staticmethod
        def forward(ctx, x, k, negate=False):
            ctx.k = -k if negate else k
            return x * ctx.k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None, None

    return Scale


def make_two_outputs(lib):
    class TwoOutputs(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b.sin(), a + b

        @staticmethod
        def backward(ctx, g1, g2):
            a, b = ctx.saved_tensors
            TwoOutputs.seen = (_np(g1), _np(g2))
            return g1 * b.sin() + g2, g1 * a * b.cos() + g2

    return TwoOutputs


def make_identity(lib):
    class Identity(lib.autograd.Function):
        """Returns its input unchanged: the output still gets this Function's history."""

        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    return Identity
