"""Named tuples returned by ops with several outputs (``values``/``indices``), as ``torch.return_types``.

>>> import jitorch
>>> jitorch.tensor([3, 1, 2]).max(0)
jitorch.return_types.max(
values=tensor(3),
indices=tensor(0))
"""
from __future__ import annotations

from collections import namedtuple


def _make(name, fields=("values", "indices")):
    base = namedtuple(name, fields)

    def __repr__(self):
        body = ",\n".join(f"{f}={v!r}" for f, v in zip(fields, self))
        return f"jitorch.return_types.{name}(\n{body})"

    cls = type(name, (base,), {"__slots__": (), "__repr__": __repr__, "__module__": __name__})
    return cls


max = _make("max")  # noqa: A001
min = _make("min")  # noqa: A001
sort = _make("sort")
topk = _make("topk")
kthvalue = _make("kthvalue")
median = _make("median")
nanmedian = _make("nanmedian")
mode = _make("mode")
cummax = _make("cummax")
cummin = _make("cummin")
aminmax = _make("aminmax", ("min", "max"))
var_mean = _make("var_mean", ("var", "mean"))
std_mean = _make("std_mean", ("std", "mean"))
slogdet = _make("slogdet", ("sign", "logabsdet"))
geqrf = _make("geqrf", ("a", "tau"))
frexp = _make("frexp", ("mantissa", "exponent"))
histogram = _make("histogram", ("hist", "bin_edges"))
histogramdd = _make("histogramdd", ("hist", "bin_edges"))
