"""jitorch.utils.benchmark against torch.utils.benchmark: the same API, measurements that behave alike."""
import pytest
import torch.utils.benchmark as tb

import jitorch
import jitorch.utils.benchmark as jb


def test_timer_measurements_have_torchs_shape():
    for lib, bm in ((jitorch, jb), (__import__("torch"), tb)):
        t = bm.Timer("x * 2", setup="y = 1", globals={"x": lib.ones(8)}, label="mul", sub_label="8", description="f",
                     num_threads=1)
        m = t.timeit(50)
        assert m.number_per_run == 50 and len(m.times) == 1 and m.median > 0 and m.mean == m.median
        assert m.label == "mul" and m.sub_label == "8" and m.description == "f" and m.num_threads == 1
        b = t.blocked_autorange(min_run_time=0.02)
        assert sum(b.raw_times) >= 0.02 and all(r > 0 for r in b.times)
        assert b.iqr >= 0 and isinstance(b.meets_confidence(), bool)


def test_compare_table_lists_rows_and_columns():
    ms = []
    for n in (4, 64):
        for op in ("add", "mul"):
            stmt = "x + x" if op == "add" else "x * x"
            ms.append(jb.Timer(stmt, globals={"x": jitorch.ones(n)}, label="ops", sub_label=f"n={n}",
                               description=op).timeit(20))
    text = str(jb.Compare(ms))
    for piece in ("ops", "n=4", "n=64", "add", "mul", "1 threads", "Times are in"):
        assert piece in text
    assert "ops: n=4" in repr(ms[0]) and "1 measurement, 20 runs , 1 thread" in repr(ms[0])  # torch's text


def test_adaptive_autorange_stops_and_threads_are_restored():
    before = jitorch.get_num_threads()
    m = jb.Timer("sum(range(50))", num_threads=1).adaptive_autorange(threshold=0.5, max_run_time=0.5)
    assert len(m.times) >= 1 and jitorch.get_num_threads() == before
    with pytest.raises(ValueError):
        jb.Timer("pass", language="c++")


def test_runs_counted_globals_and_setup_used_as_torchs():
    for bm in (jb, tb):
        calls = []
        m = bm.Timer("calls.append(y)", setup="y = 7", globals={"calls": calls}).timeit(25)
        # the statement ran `number` times in the measured block (plus warm-up runs), with setup's value
        assert m.number_per_run == 25 and len(m.raw_times) == 1 and 25 < len(calls) <= 25 + 2
        assert set(calls) == {7}
        seen = []
        b = bm.Timer("calls.append(1)", globals={"calls": calls}).blocked_autorange(
            callback=lambda number, t: seen.append(number), min_run_time=0.01)
        assert len(seen) >= len(b.raw_times) and seen[-1] == b.number_per_run
        with pytest.raises(NameError):
            bm.Timer("missing_name + 1").timeit(1)


def test_slow_statement_measures_slower_and_repr_reads_like_torchs():
    glb = {"time": __import__("time")}
    slow = jb.Timer("time.sleep(0.01)", globals=glb, label="sleep").blocked_autorange(min_run_time=0.05)
    fast = jb.Timer("pass").blocked_autorange(min_run_time=0.05)
    assert slow.median > 100 * fast.median and slow.mean > 100 * fast.mean  # 10 ms against nanoseconds
    adaptive = jb.Timer("time.sleep(0.01)", globals=glb).adaptive_autorange(max_run_time=0.1)
    assert adaptive.median > 100 * fast.median and len(adaptive.times) >= 1
    for spec, expected in ((dict(label="sleep"), ["sleep"]), (dict(sub_label="s", description="d", setup="y = 1"),
                                                             ["pass: s", "d", "setup: y = 1"])):
        theirs = repr(tb.Timer("pass", **spec).timeit(10)).splitlines()
        mine = repr(jb.Timer("pass", **spec).timeit(10)).splitlines()
        assert mine[0].startswith("<jitorch.utils.benchmark.Measurement object at 0x")
        assert mine[1:-2] == theirs[1:-2] == expected
        assert mine[-1] == theirs[-1] == "  1 measurement, 10 runs , 1 thread"
        assert mine[-2].endswith(" ns") or mine[-2].endswith(" us")
    blocks = jb.Measurement(10, [1e-5, 1e-5, 1e-5, 2e-5, 4e-5], jb.TaskSpec("x", "pass", label="L"))
    text = repr(blocks).splitlines()
    torch_text = repr(tb.Measurement(10, [1e-5, 1e-5, 1e-5, 2e-5, 4e-5], tb.TaskSpec("x", "pass", label="L")))
    assert text[1:] == torch_text.splitlines()[1:]  # median, IQR (p25 to p75), counts and the IQR warning
    assert "WARNING" in text[-2]
