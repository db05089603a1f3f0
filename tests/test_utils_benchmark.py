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


class FakeClock:
    """Time that passes only when the timed statement runs (``costs[i]`` seconds for its i-th run, cycling) or the
    clock is read (``read`` seconds a reading). Dyadic values keep every sum exact."""

    def __init__(self, costs, read):
        self.now, self.costs, self.read, self.runs = 0.0, costs, read, 0

    def __call__(self):
        self.now += self.read
        return self.now

    def run(self):
        self.now += self.costs[self.runs % len(self.costs)]
        self.runs += 1


C, R = 2.0 ** -12, 2.0 ** -24  # a run of the statement, a reading of the clock


def timed(bm, costs=(C,), read=R, **kwargs):
    clock = FakeClock(list(costs), read)
    return bm.Timer("clock.run()", globals={"clock": clock}, timer=clock, **kwargs), clock


@pytest.mark.parametrize("bm", [jb, tb], ids=["jitorch", "torch"])
def test_timeit_and_autoranges_do_torchs_arithmetic_on_a_fake_clock(bm):
    t, clock = timed(bm)
    m = t.timeit(1000)  # a warm-up block of 1000 // 100 runs, then one block of 1000
    assert (m.number_per_run, m.raw_times, clock.runs) == (1000, [1000 * C + R], 1010)
    assert m.times == [(1000 * C + R) / 1000] and m.median == m.mean == (1000 * C + R) / 1000
    t, clock = timed(bm, costs=(0.0,), read=0.0)
    assert t.timeit(5).raw_times == [1e-9] and clock.runs == 2 + 5  # a block is never shorter than 1 ns

    # Block size: the clock's cost R is 2**-12 of a one-run block (over 1e-4), 2**-15 of a ten-run block (under).
    # blocked_autorange: blocks of 10 until 0.2 s have passed: 0.2 / (10 C + R) = 81.9, so 82 blocks.
    t, clock = timed(bm)
    seen = []
    m = t.blocked_autorange(callback=lambda number, time: seen.append((number, time)), min_run_time=0.2)
    assert (m.number_per_run, m.raw_times, seen) == (10, [10 * C + R] * 82, [(10, 10 * C + R)] * 82)
    assert clock.runs == 1 + 10 + 82 * 10  # the size probes (five empty blocks, then 1 and 10 runs), the blocks

    # adaptive_autorange: equal blocks (IQR 0) stop at the first count over 3 past 0.01 s: 5 blocks of 10 C + R
    m = timed(bm)[0].adaptive_autorange(threshold=0.1, min_run_time=0.01)
    assert (m.number_per_run, m.raw_times) == (10, [10 * C + R] * 5)
    # Blocks alternating 28 C and 12 C (runs cost C, C, 3 C, 3 C, ...: ten at a time) are never within the
    # threshold, so blocks go on until their total passes max_run_time: ten pairs are 0.0977 s, the 21st block 0.105.
    m = timed(bm, costs=[C] * 10 + [3 * C] * 10)[0].adaptive_autorange(threshold=0.1, max_run_time=0.1)
    assert m.number_per_run == 10 and m.raw_times == [28 * C + R, 12 * C + R] * 10 + [28 * C + R]
    # A statement slower than min_run_time / 1000 with a negligible clock gets blocks of one run
    m = timed(bm, costs=(2.0 ** -6,))[0].blocked_autorange(min_run_time=0.1)
    assert (m.number_per_run, m.raw_times) == (1, [2.0 ** -6 + R] * 7)  # 0.1 / 2**-6 = 6.4


def test_measurement_reprs_read_like_torchs():
    for spec in (dict(label="sleep"), dict(sub_label="s", description="d", setup="y = 1")):
        theirs = repr(timed(tb, **spec)[0].timeit(10)).splitlines()
        mine = repr(timed(jb, **spec)[0].timeit(10)).splitlines()
        assert mine[0].startswith("<jitorch.utils.benchmark.Measurement object at 0x")
        assert mine[1:] == theirs[1:]
        assert mine[-2:] == [f"  {(10 * C + R) / 10 * 1e6:.2f} us", "  1 measurement, 10 runs , 1 thread"]
    theirs = repr(timed(tb, costs=[C] * 10 + [3 * C] * 10)[0].blocked_autorange(min_run_time=0.1)).splitlines()
    mine = repr(timed(jb, costs=[C] * 10 + [3 * C] * 10)[0].blocked_autorange(min_run_time=0.1)).splitlines()
    assert mine[1:] == theirs[1:] and "WARNING" in mine[-2]  # median, IQR, counts and the IQR warning
    blocks = jb.Measurement(10, [1e-5, 1e-5, 1e-5, 2e-5, 4e-5], jb.TaskSpec("x", "pass", label="L"))
    text = repr(blocks).splitlines()
    torch_text = repr(tb.Measurement(10, [1e-5, 1e-5, 1e-5, 2e-5, 4e-5], tb.TaskSpec("x", "pass", label="L")))
    assert text[1:] == torch_text.splitlines()[1:]
    assert "WARNING" in text[-2]
