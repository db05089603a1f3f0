"""jitorch.profiler and jitorch.autograd.profiler: ops and ranges recorded with their nesting, PyTorch's schedule,
tables, traces; the dispatcher's mode stack restored afterwards; compiled calls keep running compiled."""
import json

import pytest
import torch

import jitorch
from jitorch._dispatch import MODES
from jitorch.profiler import ProfilerAction, profile, record_function, schedule, tensorboard_trace_handler


def test_ops_and_ranges_are_recorded_with_nesting_and_self_times():
    x = jitorch.randn(8, 8, requires_grad=True)
    with profile(record_shapes=True) as prof:
        with record_function("outer"):
            y = (x @ x).relu().sum()
            with record_function("inner"):
                y.backward()
    assert not MODES
    events = prof.events()
    outer = next(e for e in events if e.name == "outer")
    inner = next(e for e in events if e.name == "inner")
    assert inner.cpu_parent is outer and outer.is_user_annotation
    names = [e.name for e in events]
    for op in ("aten::matmul", "aten::relu", "aten::sum"):
        assert op in names
    assert any(e.cpu_parent is inner for e in events)  # backward's ops nest under the range that ran it
    matmul = next(e for e in events if e.name == "aten::matmul")
    assert matmul.input_shapes == [[8, 8], [8, 8]]
    # self times partition the total
    assert abs(events.self_cpu_time_total - outer.cpu_time_total) < 1e-6 * max(outer.cpu_time_total, 1)
    avg = {e.key: e for e in prof.key_averages()}
    assert avg["outer"].count == 1 and avg["aten::matmul"].count >= 1
    grouped = prof.key_averages(group_by_input_shape=True)
    assert any(e.input_shapes == [[8, 8], [8, 8]] for e in grouped)


def test_table_lists_the_events_and_refuses_unknown_sort_keys():
    with profile() as prof:
        with record_function("block"):
            jitorch.ones(3, 3).exp().sum()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)
    for text in ("Name", "Self CPU %", "# of Calls", "block", "aten::exp", "Self CPU time total"):
        assert text in table
    with pytest.raises(AttributeError):
        prof.key_averages().table(sort_by="nonsense")


@pytest.mark.parametrize("kwargs", [dict(wait=1, warmup=1, active=2), dict(wait=0, warmup=0, active=1, repeat=2),
                                    dict(wait=2, warmup=1, active=3, repeat=1, skip_first=3)])
@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_schedule_matches_torch(kwargs):
    if kwargs["warmup"] == 0:
        with pytest.warns(UserWarning, match="won't be using warmup"):
            schedule(**kwargs)
    ours, theirs = schedule(**kwargs), torch.profiler.schedule(**kwargs)
    assert [ours(i).name for i in range(20)] == [theirs(i).name for i in range(20)]
    assert ProfilerAction.RECORD_AND_SAVE.name == "RECORD_AND_SAVE"


def test_scheduled_profile_hands_each_active_cycle_to_on_trace_ready(tmp_path):
    traces = []
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=2), on_trace_ready=traces.append) as prof:
        for step in range(9):
            jitorch.ones(2) + step
            prof.step()
    assert len(traces) == 2 and all(len(t.events()) >= 1 for t in traces)
    handler = tensorboard_trace_handler(str(tmp_path), worker_name="w")
    handler(prof)
    written = list(tmp_path.iterdir())
    assert len(written) == 1 and written[0].name.startswith("w.")
    assert "traceEvents" in json.loads(written[0].read_text())


def test_chrome_trace_export(tmp_path):
    with profile() as prof:
        jitorch.ones(4).mul(2)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    assert any(e["name"] == "aten::mul" and e["ph"] == "X" and e["dur"] >= 0 for e in events)


def test_compiled_functions_stay_compiled_and_appear_as_one_range():
    fn = jitorch.compile(lambda a: (a.sin() * 2).exp())
    x = jitorch.randn(64)
    for _ in range(3):
        fn(x)
    with profile() as prof:
        y = fn(x)
    assert [e.key for e in prof.key_averages()] == ["jitorch.compile: <lambda>"]
    assert bool(jitorch.allclose(y, (x.sin() * 2).exp()))


def test_an_exception_inside_leaves_the_dispatcher_clean():
    with pytest.raises(ValueError):
        with profile():
            jitorch.ones(2) + 1
            raise ValueError("boom")
    assert not MODES
    assert jitorch.ones(2).add(1).tolist() == [2.0, 2.0]


def test_legacy_autograd_profiler():
    with jitorch.autograd.profiler.profile() as prof:
        with jitorch.autograd.profiler.record_function("r"):
            jitorch.ones(3) * 2
    assert {"r", "aten::mul"} <= {e.key for e in prof.key_averages()}
    assert "Self CPU time total" in prof.table()
    with jitorch.autograd.profiler.profile(enabled=False) as off:
        jitorch.ones(3) * 2
    assert len(off.function_events) == 0 and not MODES
    with jitorch.autograd.profiler.emit_nvtx():
        pass

    @record_function("decorated")
    def f():
        return jitorch.ones(1) + 1

    with profile() as prof:
        f()
    assert "decorated" in [e.key for e in prof.key_averages()]
