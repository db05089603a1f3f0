"""The op table: every row in ``jitorch.ops.OPS`` has every column filled, and the validator rejects a row that
does not."""
import copy
import doctest

import numpy as np
import pytest

import jitorch
from jitorch.ops import OPS
from jitorch.ops import table
from jitorch.ops.table import NOT_DIFFERENTIABLE, Opaque, Pointwise, Reduction, View, validate_row

ROWS = sorted(OPS)


@pytest.mark.parametrize("name", ROWS)
def test_every_row_has_every_column(name):
    op = OPS[name]
    assert op.name == name
    assert callable(op.kernel), f"{name}: kernel"
    assert op.backward is NOT_DIFFERENTIABLE or callable(op.backward), f"{name}: backward"
    assert isinstance(op.fusion, (Pointwise, Reduction, View, Opaque)), f"{name}: fusion {op.fusion!r}"
    assert op.promotion in table.PROMOTIONS, f"{name}: promotion {op.promotion!r}"
    assert op.saves in table.SAVES, f"{name}: saves {op.saves!r}"
    assert op.differentiable is (op.backward is not NOT_DIFFERENTIABLE)
    assert validate_row(op) is op


def test_table_covers_the_families():
    kinds = {type(op.fusion) for op in OPS.values()}
    assert kinds == {Pointwise, Reduction, View, Opaque}
    for name in ("add", "mul", "exp", "where", "clamp", "sum", "amax", "cumsum", "view", "permute", "expand", "cat"):
        assert name in OPS, name


def _broken(**columns):
    """A copy of the ``add`` row (not registered) with some columns replaced."""
    op = copy.copy(OPS["add"])
    for column, value in columns.items():
        setattr(op, column, value)
    return op


BAD_ROWS = {
    "kernel": dict(kernel=None),
    "backward": dict(backward=None),
    "fusion": dict(fusion=None),
    "fusion expression": dict(fusion=Pointwise("")),
    "reduction kind": dict(fusion=Reduction(""), view=False),
    "promotion": dict(promotion="widen"),
    "saves": dict(saves="everything"),
    "nout": dict(nout=0),
    "nondiff_outputs": dict(nondiff_outputs=(3,)),
    "view without View fusion": dict(view=True),
    "grad_name": dict(grad_name=""),
    "row_major_out": dict(row_major_out=None),
    "name": dict(name=""),
}


@pytest.mark.parametrize("column", list(BAD_ROWS))
def test_validator_rejects_a_row_with_an_empty_column(column):
    op = _broken(**BAD_ROWS[column])
    with pytest.raises(ValueError) as err:
        validate_row(op)
    word = column.split()[0].split("_")[0]
    assert word in str(err.value).lower(), f"the message should name the {column} column: {err.value}"
    assert "add" in str(err.value) or column == "name"


def test_validator_reports_every_problem_at_once():
    with pytest.raises(ValueError) as err:
        validate_row(_broken(kernel=None, fusion=None, promotion="?"))
    assert all(w in str(err.value) for w in ("kernel", "fusion", "promotion"))


def test_defop_rejects_bad_promotion_saves_and_duplicates():
    with pytest.raises(ValueError, match="promotion"):
        table.OpDef("tmp_bad_promotion", lambda xp, a: a, NOT_DIFFERENTIABLE, Opaque(), promotion="widen")
    with pytest.raises(ValueError, match="saves"):
        table.OpDef("tmp_bad_saves", lambda xp, a: a, NOT_DIFFERENTIABLE, Opaque(), saves="all")
    with pytest.raises(ValueError, match="already defined"):
        table.defop("add", lambda xp, a, b: a + b, NOT_DIFFERENTIABLE, Opaque())
    assert "tmp_bad_promotion" not in OPS and "tmp_bad_saves" not in OPS


@pytest.mark.parametrize("name", ["linear", "sum", "amax", "cumsum"])
def test_row_major_out_rows_return_row_major_arrays(name):
    """The flag a sum's backward trusts: the row's kernel gives a C-contiguous result for a transposed input."""
    op = OPS[name]
    assert op.row_major_out and not OPS["add"].row_major_out
    x = np.arange(24.0).reshape(4, 6).T  # Fortran order
    if name == "linear":
        out = op.kernel(np, x, np.ones((3, 4)), None)
    elif name == "cumsum":
        out = op.kernel(np, x, dim=0, dtype=x.dtype)
    else:
        out = op.kernel(np, x[:, :, None], dims=(2,), keepdim=True, **({"dtype": x.dtype} if name == "sum" else {}))
    assert out.flags.c_contiguous and not x.flags.c_contiguous


@pytest.mark.parametrize("name", [n for n in ROWS if not OPS[n].differentiable])
def test_not_differentiable_rows_produce_no_gradient(name):
    op = OPS[name]
    assert not op.differentiable

    class Ctx:
        def name(self):
            return op.grad_name
    with pytest.raises(RuntimeError, match="not differentiable"):
        op.backward(Ctx(), None)


@pytest.mark.parametrize("name", [n for n in ROWS if isinstance(OPS[n].fusion, Pointwise)])
def test_pointwise_kernels_run_on_numpy(name):
    """Pointwise kernels are elementwise: run on NumPy with as many operands as the expression names."""
    op = OPS[name]
    expr = op.fusion.expr
    arity = sum(f"{{{i}}}" in expr for i in range(4))
    if arity == 0 or name in ("copy", "fill", "to_copy") or op.promotion == "integral" or op.masks:
        return  # operands that are not plain float arrays (a value, a dtype attr, integers or a mask)
    x = np.linspace(0.1, 0.9, 6).reshape(2, 3)
    args = [x] * arity
    if name == "clamp":
        args = [x, 0.2, 0.8]
    if name in ("lerp_scalar", "add_alpha", "sub_alpha"):  # (the weight, alpha, is a Python number)
        args = [x, x[::-1], 0.3]
    if name in ("elu", "elu_backward"):  # (alpha, scale and input scale are Python numbers)
        args = [x] * (name == "elu_backward") + [x - 0.5, 1.0, 1.0, 1.0]
    out = op.kernel(np, *args)
    assert np.shape(out) == (2, 3), f"{name}: elementwise output shape {np.shape(out)}"


def test_validate_row_doctest():
    # Only validate_row's example: the module docstring's ``Pointwise('{0} + {1}')`` predates the dataclass repr.
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(validate_row, "validate_row", globs={"validate_row": validate_row,
                                                                               "OPS": OPS, "jitorch": jitorch}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 1


SUITES = ("test_pointwise.py", "pointwise_cases.py", "test_pointwise_inplace_errors.py", "test_reduction.py",
          "test_movement.py", "test_creation.py", "test_promotion.py")


@pytest.mark.parametrize("module", ["_pointwise", "_reduction", "_movement", "_creation", "_random"])
def test_every_public_function_is_exercised(module):
    """A new public function must come with a test: its name has to appear as ``.name``, ``"name"`` or ``T.name``."""
    import importlib
    import re
    from pathlib import Path

    here = Path(__file__).resolve().parent
    text = "\n".join((here / f).read_text() for f in SUITES)
    names = importlib.import_module(f"jitorch.{module}").__all__
    missing = [n for n in names if not re.search(rf'(\.|"){re.escape(n)}\b', text)]
    assert not missing, f"jitorch/{module}.py functions without a test: {missing}"
