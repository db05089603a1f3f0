"""``jitorch.__version__`` is a ``TorchVersion`` that compares as ``torch.__version__`` does: against strings, tuples
and ``packaging`` versions, with plain string comparison for non-versions."""
from __future__ import annotations

import itertools
import operator
import pickle

import pytest
from torch._vendor.packaging.version import Version
from torch.torch_version import TorchVersion as TorchTorchVersion

import jitorch
from jitorch.torch_version import TorchVersion

VERSIONS = ["0.1.0", "2.13.0+cpu", "2.0", "2.0.0a0", "2.1.0rc1", "2.1.0.dev20230101", "1.10.0a", "2.0.1.post2",
            "1!0.5", "2.13.0+cu121", "2.13.0+cpu.1"]
OTHERS = ["2.0", "2", "2.13", "0.1", "0.1.0", "0.1.0rc2", "2.13.0+cpu", "2.13.0", "2.1.0", "2.1.0b3", "1.10",
          "parrot", "", (2, 0), (0, 1, 0), (2, 13), (1, 10, 0), [2, 13, 0], (1,)]
OPS = [operator.lt, operator.le, operator.eq, operator.ne, operator.ge, operator.gt]


@pytest.mark.parametrize("version", VERSIONS)
def test_comparisons_match_torch(version):
    mine, theirs = TorchVersion(version), TorchTorchVersion(version)
    for other, op in itertools.product(OTHERS, OPS):
        assert op(mine, other) == op(theirs, other), f"{version} {op.__name__} {other!r}"


@pytest.mark.parametrize("version", VERSIONS)
def test_comparisons_with_packaging_versions_match_torch(version):
    mine, theirs = TorchVersion(version), TorchTorchVersion(version)
    for other in ("2.0", "0.1.0", "2.13.0+cpu", "2.1.0rc1"):
        for op in (operator.lt, operator.le, operator.eq, operator.ge, operator.gt):
            assert op(mine, Version(other)) == op(theirs, Version(other)), f"{version} {op.__name__} {other}"


def test_jitorch_version_is_a_comparable_str():
    v = jitorch.__version__
    assert isinstance(v, str) and isinstance(v, TorchVersion) and v == "0.1.0"
    assert v >= (0, 1) and v >= "0.1" and v < (1, 0) and v < "0.10" and v > "0.1.0rc1" and v > "0.0.9"
    assert hash(v) == hash("0.1.0") and {"0.1.0": 1}[v] == 1
    assert v.split(".") == ["0", "1", "0"] and f"{v}" == "0.1.0"
    assert pickle.loads(pickle.dumps(v)) == v


def test_non_version_falls_back_to_string_order():
    v = TorchVersion("parrot")
    assert (v < "zebra", v > "apple", v == "parrot", v != "parrot") == (True, True, True, False)
    for cls in (TorchVersion, TorchTorchVersion):  # a non-version string and a tuple do not compare, in both
        with pytest.raises(TypeError):
            cls("parrot") >= (1, 0)  # noqa: B015
