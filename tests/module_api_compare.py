"""Run one piece of user code against torch and against jitorch and compare everything a user sees.

``same_behaviour(case)`` calls ``case(lib)`` for both libraries and asserts equal outcomes: the returned value (plain
Python data: lists, strings, tuples of them) or the exception's type and full message, plus every warning's category
and text, with jitorch's names read as torch's.
"""
from __future__ import annotations

import warnings

import torch

import jitorch

__all__ = ["behaviour", "same_behaviour"]


def behaviour(lib, case):
    """``(outcome, warnings)`` of ``case(lib)`` as a string; the outcome is ``("ok", value)`` or
    ``("err", exception type name, message)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome = ("ok", case(lib))
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            outcome = ("err", type(e).__name__, str(e))
    seen = [(w.category.__name__, str(w.message)) for w in caught]
    return repr((outcome, seen)).replace("jitorch", "torch")


def same_behaviour(case):
    """Assert that ``case(jitorch)`` behaves as ``case(torch)``; returns torch's behaviour string."""
    expected = behaviour(torch, case)
    assert behaviour(jitorch, case) == expected
    return expected


def fixed_linear(lib, fin, fout):
    """A Linear with fixed, distinct weights (no generator involved)."""
    m = lib.nn.Linear(fin, fout)
    with lib.no_grad():
        m.weight.copy_(lib.arange(fin * fout, dtype=lib.float32).reshape(fout, fin) * 0.5 - 1)
        m.bias.fill_(0.25)
    return m
