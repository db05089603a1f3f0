"""``torch.nn.attention.bias``: causal masks for queries and keys of different lengths, passed to
``scaled_dot_product_attention`` as ``attn_mask``.

- ``causal_upper_left(q_len, kv_len)``: query ``i`` sees keys ``0..i`` (the diagonal starts at the top left; what
  ``is_causal=True`` means).
- ``causal_lower_right(q_len, kv_len)``: the diagonal ends at the bottom right, so the last query sees every key:
  decoding with a key/value cache, where the queries are the newest positions.

A ``CausalBias`` is a Tensor holding the boolean mask; any function handed one computes with that mask and returns
plain tensors.

>>> import jitorch
>>> causal_lower_right(2, 4).tolist()
[[True, True, True, False], [True, True, True, True]]
"""
from __future__ import annotations

import enum
import warnings

from ..._tensor import Tensor

__all__ = ["causal_upper_left", "causal_lower_right", "CausalVariant", "CausalBias"]


class CausalVariant(enum.IntEnum):
    """Where the causal diagonal is anchored (torch's values)."""

    UPPER_LEFT = 1
    LOWER_RIGHT = 2


def _mask(variant, seq_len_q, seq_len_kv, device=None):
    import jitorch

    diagonal = 0 if variant == CausalVariant.UPPER_LEFT else seq_len_kv - seq_len_q
    ones = jitorch.ones(seq_len_q, seq_len_kv, dtype=jitorch.bool, device=device)
    return jitorch.tril(ones, diagonal=diagonal)


def _plain(value):
    return value._materialize() if isinstance(value, CausalBias) else value


class CausalBias(Tensor):
    """A causal mask of one ``variant`` over ``seq_len_q`` queries and ``seq_len_kv`` keys.

    >>> import jitorch
    >>> q, k = jitorch.randn(1, 1, 2, 4), jitorch.randn(1, 1, 3, 4)
    >>> mask = CausalBias(CausalVariant.LOWER_RIGHT, 2, 3)
    >>> type(jitorch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=mask)).__name__
    'Tensor'
    """

    def __new__(cls, variant, seq_len_q, seq_len_kv):
        mask = _mask(CausalVariant(variant), seq_len_q, seq_len_kv)
        self = Tensor._make_subclass(cls, mask)
        self.variant, self.seq_len_q, self.seq_len_kv = CausalVariant(variant), seq_len_q, seq_len_kv
        return self

    def __init__(self, variant, seq_len_q, seq_len_kv):
        if self.variant == CausalVariant.LOWER_RIGHT and seq_len_q > seq_len_kv:
            warnings.warn("Lower right causal bias will produce NaNs in the output when seq_len_q > seq_len_kv!",
                          stacklevel=3)

    def _materialize(self, device=None):
        """The mask as a plain boolean tensor of shape (seq_len_q, seq_len_kv)."""
        return _mask(self.variant, self.seq_len_q, self.seq_len_kv, device=device)

    def _upper_left(self, device=None):
        return _mask(CausalVariant.UPPER_LEFT, self.seq_len_q, self.seq_len_kv, device)

    def _lower_right(self, device=None):
        return _mask(CausalVariant.LOWER_RIGHT, self.seq_len_q, self.seq_len_kv, device)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Every function sees the plain mask and returns plain tensors (the default protocol would hand back
        # CausalBias instances, e.g. an attention output claiming to be a mask).
        from ..._C import DisableTorchFunctionSubclass

        args = tuple(_plain(a) for a in args)
        kwargs = {k: _plain(v) for k, v in (kwargs or {}).items()}
        with DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    def __repr__(self):
        return repr(self._materialize())


def causal_upper_left(*size):
    """A causal mask anchored at the top left (``is_causal=True``'s) for ``(seq_len_q, seq_len_kv)``.

    >>> causal_upper_left(2, 3).tolist()
    [[True, False, False], [True, True, False]]
    """
    if len(size) != 2:
        raise ValueError(f"causal_upper_left only supports 2D tensors: pass (seq_len_q, seq_len_kv), got {size}")
    return CausalBias(CausalVariant.UPPER_LEFT, *size)


def causal_lower_right(*size):
    """A causal mask anchored at the bottom right for ``(seq_len_q, seq_len_kv)`` (queries are the newest tokens).

    >>> causal_lower_right(1, 3).tolist()
    [[True, True, True]]
    """
    if len(size) != 2:
        raise ValueError(f"causal_lower_right only supports 2D tensors: pass (seq_len_q, seq_len_kv), got {size}")
    return CausalBias(CausalVariant.LOWER_RIGHT, *size)
