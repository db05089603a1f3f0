"""Training-loop flags as reproducibility-minded scripts set them, run with ``lib=torch`` and ``lib=jitorch``.

``use_deterministic_algorithms(True)`` fills uninitialized memory as torch does (NaN, the largest integer, True) in
``empty`` and its kin, unless ``torch.utils.deterministic.fill_uninitialized_memory`` is turned off. A profile taken
``with_stack=True`` exports its stacks for flame graphs (``export_stacks``), with torch's refusals.
``torch.overrides.TorchFunctionMode`` sees the calls of a training step under torch's names, nests, and can rewrite
the calls it sees (a factory dtype mode).
"""
from __future__ import annotations

import pytest
import torch

import jitorch
from sweep_helpers import assert_close_tree

LIBS = (torch, jitorch)


@pytest.fixture
def deterministic():
    yield
    for lib in LIBS:
        lib.use_deterministic_algorithms(False)
        lib.utils.deterministic.fill_uninitialized_memory = True


def _uninitialized(lib):
    x = lib.ones(2, 3).t()
    return [lib.empty(2), lib.empty(2, dtype=lib.bfloat16).float(), lib.empty(2, dtype=lib.int32),
            lib.empty(2, dtype=lib.uint8), lib.empty(2, dtype=lib.bool),
            lib.view_as_real(lib.empty(2, dtype=lib.complex64)),
            lib.empty_like(x), lib.empty_like(lib.ones(2, dtype=lib.long)), lib.Tensor(3), lib.ones(2).new_empty(3),
            lib.empty_strided((2, 2), (1, 2)), lib.empty(1, 2, 2, 2, memory_format=lib.channels_last),
            lib.empty(2, requires_grad=True)]


def test_deterministic_mode_fills_uninitialized_memory(deterministic):
    def run(lib):
        lib.use_deterministic_algorithms(True)
        filled = _uninitialized(lib)
        lib.utils.deterministic.fill_uninitialized_memory = False
        return filled, lib.utils.deterministic.fill_uninitialized_memory, lib.are_deterministic_algorithms_enabled()
    assert_close_tree(run(torch), run(jitorch))


def _profiled_step(lib, with_stack):
    model = lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.ReLU(), lib.nn.Linear(8, 2))
    with lib.profiler.profile(with_stack=with_stack) as prof:
        with lib.profiler.record_function("train_step"):
            model(lib.ones(3, 4)).sum().backward()
    return prof


def test_profiler_export_stacks(tmp_path):
    for lib in LIBS:
        # A first step outside the stack profile runs the lazy imports: torch's Python tracer can read a freed
        # module code object's name when an import executes under with_stack (a UnicodeDecodeError, now and then).
        _profiled_step(lib, with_stack=False)
        prof = _profiled_step(lib, with_stack=True)
        path = tmp_path / f"{lib.__name__}.stacks"
        prof.export_stacks(str(path), "self_cpu_time_total")
        assert path.exists()
        with pytest.raises(ValueError, match="metric should be one of"):
            prof.export_stacks(str(path), "cpu_time_total")
        with pytest.raises(AssertionError, match=r"export_stacks\(\) requires with_stack=True"):
            _profiled_step(lib, with_stack=False).export_stacks(str(path))
        assert isinstance(prof.key_averages(group_by_stack_n=3).table(sort_by="self_cpu_time_total"), str)
    # (torch's CPU-only build records no Python stacks; jitorch records the caller's frames, outermost first)
    lines = (tmp_path / "jitorch.stacks").read_text().splitlines()
    assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
    assert any(f"{__file__}(" in line and ":__profiled_step" in line for line in lines)


def _logging_mode(lib):
    class Logged(lib.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(func.__name__)
            return func(*args, **(kwargs or {}))
    return Logged()


def test_function_mode_sees_a_training_step():
    def run(lib):
        x = lib.ones(2, requires_grad=True)
        with _logging_mode(lib) as mode:
            y = lib.relu(x) * 3
            loss = lib.nn.functional.linear(y, lib.ones(3, 2)).sum() + (2 - y).mean()
            loss.backward()
            y[0], y.view(2), x.detach().clone(), y < x, x @ x, 2 ** x, 1 / x  # noqa: B018
        return mode.calls, x.grad, loss, lib.relu(x)  # (the last call made outside: not logged)
    assert_close_tree(run(torch), run(jitorch))


def test_function_modes_nest_and_rewrite_calls():
    def run(lib):
        log = []

        class Double(lib.overrides.TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                log.append(func.__name__)
                kwargs = dict(kwargs or {})
                if func.__name__ in ("zeros", "ones", "tensor"):
                    kwargs.setdefault("dtype", lib.float64)
                return func(*args, **kwargs)
        with Double() as outer:
            with _logging_mode(lib) as inner:
                a = lib.zeros(2) + lib.tensor([1.0, 2.0])
            b = lib.ones(2).exp()
            current = lib.overrides._get_current_function_mode() is outer
        return log, inner.calls, a, b, current, lib.overrides._get_current_function_mode() is None
    assert_close_tree(run(torch), run(jitorch))
