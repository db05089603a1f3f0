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
from jitorch._version import __version__ as jitorch_release
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
    # The PyTorch API release jitorch follows, jitorch's own release as the local label: version checks in user code
    # (``torch.__version__ >= "2.0"``) take their modern paths.
    v = jitorch.__version__
    plain = f"2.13.0+jitorch.{jitorch_release}"
    assert isinstance(v, str) and isinstance(v, TorchVersion) and v == plain == jitorch.version.__version__
    assert v >= (2, 0) and v >= "2.0" and v >= "1.13" and v < (3, 0) and v < "2.14" and v > "2.13.0rc1"
    assert Version(v) >= Version("2.0") and Version(v).local == f"jitorch.{jitorch_release}"
    assert hash(v) == hash(plain) and {plain: 1}[v] == 1
    assert f"{v}" == plain
    assert pickle.loads(pickle.dumps(v)) == v
    assert jitorch.version.cuda is None or jitorch.version.cuda.count(".") == 1
    assert jitorch.version.jitorch == jitorch_release


def test_non_version_falls_back_to_string_order():
    v = TorchVersion("parrot")
    assert (v < "zebra", v > "apple", v == "parrot", v != "parrot") == (True, True, True, False)
    for cls in (TorchVersion, TorchTorchVersion):  # a non-version string and a tuple do not compare, in both
        with pytest.raises(TypeError):
            cls("parrot") >= (1, 0)  # noqa: B015
