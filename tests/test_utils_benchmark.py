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
    assert "ops" in repr(ms[0]) and "20 runs per measurement" in repr(ms[0])


def test_adaptive_autorange_stops_and_threads_are_restored():
    before = jitorch.get_num_threads()
    m = jb.Timer("sum(range(50))", num_threads=1).adaptive_autorange(threshold=0.5, max_run_time=0.5)
    assert len(m.times) >= 1 and jitorch.get_num_threads() == before
    with pytest.raises(ValueError):
        jb.Timer("pass", language="c++")
