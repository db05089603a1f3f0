"""Tolerances shared by the ``nn.functional`` tests."""
from __future__ import annotations


F32 = {"atol": 1e-5, "rtol": 1e-4}
