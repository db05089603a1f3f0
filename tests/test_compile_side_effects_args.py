"""jitorch.compile keeps eager's results when a call writes into its argument containers (deques, list and dict
subclasses, registered pytree nodes, dataclasses), when NumPy arrays held in argument or global lists change in
place between calls, and when a cache the call fills is invalidated again and again (test_compile_side_effects:
the basics)."""
import collections
import dataclasses
import warnings

import numpy as np
import torch

import jitorch
from jitorch.utils import _pytree as pytree
from test_compile_side_effects import _close
from test_compile_side_effects_more import _lazy_mask_model

RNG = np.random.default_rng(7)


def _x(lib, i):
    return lib.tensor(RNG.standard_normal(3).astype(np.float32) if i is None else np.full(3, i + 1.0, np.float32))


def _run_both(fn, make, calls=5):
    """Calls ``fn`` compiled (jitorch) and eagerly (torch) on containers ``make(lib)`` built alike; returns both."""
    compiled = jitorch.compile(fn)
    mine, theirs = make(jitorch), make(torch)
    for i in range(calls):
        _close(compiled(_x(jitorch, i), mine), fn(_x(torch, i), theirs), atol=1e-5)
    return mine, theirs


def _close_all(mine, theirs):
    assert len(mine) == len(theirs)
    for got, want in zip(mine, theirs):
        _close(got, want, atol=1e-5)


class TaggedList(list):
    pass


class TaggedDict(dict):
    pass


def test_a_list_subclass_argument_gets_the_calls_appends_and_attributes():
    def step(x, hs):
        hs.append(hs[0] + x)
        hs.count = len(hs)
        return hs[-1] * 2

    mine, theirs = _run_both(step, lambda lib: TaggedList([lib.ones(3)]))
    _close_all(mine, theirs)
    assert mine.count == theirs.count == 6


def test_a_dict_subclass_argument_gets_the_calls_items_and_attributes():
    def step(x, batch):
        batch["h"] = batch["x"] + x
        batch.calls = getattr(batch, "calls", 0) + 1
        return batch["h"].sum()

    mine, theirs = _run_both(step, lambda lib: TaggedDict(x=lib.ones(3)))
    _close(mine["h"], theirs["h"])
    assert mine.calls == theirs.calls == 5 and type(mine) is TaggedDict


def test_an_attribute_set_on_a_list_subclass_without_other_changes_reaches_the_caller():
    def step(x, hs):
        hs.last_sum = float(hs[0].sum())  # a value read: a graph break
        return hs[0] + x

    mine, theirs = _run_both(step, lambda lib: TaggedList([lib.ones(3)]))
    assert mine.last_sum == theirs.last_sum == 3.0

    def mark(x, hs):
        hs.seen = True
        return hs[0] + x

    mine, theirs = _run_both(mark, lambda lib: TaggedList([lib.ones(3)]))
    assert mine.seen is True and theirs.seen is True


def test_deque_arguments_get_appends_item_writes_and_in_place_updates():
    def step(x, q):
        q.append(q[-1] + x)
        q[0] = q[0] * 0.5
        q[1].add_(x)
        return q[0] + q[1]

    mine, theirs = _run_both(step, lambda lib: collections.deque([lib.ones(3), lib.zeros(3)], maxlen=4))
    assert mine.maxlen == 4
    _close_all(mine, theirs)


def test_a_deque_argument_whose_tensor_is_replaced_between_calls_is_read_again():
    f = jitorch.compile(lambda x, q: x + q[0] * 2)
    q = collections.deque([jitorch.ones(3)])
    x = _x(jitorch, None)
    for scale in (1.0, 1.0, 3.0, 4.0):
        q[0] = jitorch.full((3,), scale)
        _close(f(x, q), torch.tensor(x.tolist()) + scale * 2)


@dataclasses.dataclass
class Running:
    total: object
    calls: int = 0


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


pytree.register_pytree_node(Pair, lambda p: ([p.a, p.b], None), lambda children, _: Pair(*children))


def test_dataclass_and_pytree_node_arguments_get_attribute_sets_and_in_place_updates():
    def accumulate(x, r):
        r.calls += 1
        r.total = r.total + x
        return r.total * r.calls

    mine, theirs = _run_both(accumulate, lambda lib: Running(lib.zeros(3)))
    assert mine.calls == theirs.calls == 5
    _close(mine.total, theirs.total)

    def scale(x, p):
        p.a.mul_(2)
        p.b = p.b + x
        return p.a + p.b

    mine, theirs = _run_both(scale, lambda lib: Pair(lib.ones(3), lib.zeros(3)))
    _close_all([mine.a, mine.b], [theirs.a, theirs.b])


def test_a_named_tuple_argument_with_a_log_list_and_in_place_tensor():
    Item = collections.namedtuple("Item", "t log")

    def step(x, item):
        item.t.add_(x)
        item.log.append(item.t.sum())
        return item.t * len(item.log)

    mine, theirs = _run_both(step, lambda lib: Item(lib.zeros(3), []))
    _close(mine.t, theirs.t)
    _close_all(mine.log, theirs.log)


def _read_first(x, arrays):
    return x * float(arrays[0].sum()) + len(arrays)


def test_numpy_arrays_in_argument_containers_changed_in_place_are_read_again():
    for n in (3, 17, 40):
        for kind in (list, tuple, collections.deque):
            f = jitorch.compile(_read_first)
            arrays = kind(np.ones(2) for _ in range(n))
            x = _x(jitorch, None)
            for step in range(4):
                if step >= 2:
                    arrays[0][0] += 5.0  # the same array object, new values
                _close(f(x, arrays), torch.tensor(x.tolist()) * float(arrays[0].sum()) + n, atol=1e-5)


def test_numpy_arrays_in_argument_lists_holding_tensors_changed_in_place_are_read_again():
    f = jitorch.compile(lambda x, items: items[1] * float(items[0][1]) + x)
    items = [np.ones(3), jitorch.ones(3)] + [np.zeros(2) for _ in range(20)]
    x = _x(jitorch, None)
    for step in range(4):
        items[0][1] = step
        _close(f(x, items), torch.tensor(x.tolist()) + float(step))


LONG_ARRAYS = [np.ones(2) for _ in range(20)]
LONG_MIXED = [jitorch.ones(3) for _ in range(19)] + [np.ones(2)]


def _read_long_global(x):
    return x * float(LONG_ARRAYS[0].sum())


def _read_long_mixed(x):
    return x * float(LONG_MIXED[-1].sum()) + LONG_MIXED[0]


def test_numpy_arrays_in_long_global_lists_changed_in_place_are_read_again():
    f, g = jitorch.compile(_read_long_global), jitorch.compile(_read_long_mixed)
    x = _x(jitorch, None)
    xt = torch.tensor(x.tolist())
    for step in range(5):
        LONG_ARRAYS[0][1] = LONG_MIXED[-1][0] = step
        _close(f(x), xt * (1.0 + step))
        _close(g(x), xt * (1.0 + step) + 1.0)


def test_an_invalidated_cache_refilled_many_times_never_reaches_the_recompile_limit():
    for grad in (False, True):
        m, ref = _lazy_mask_model(jitorch), _lazy_mask_model(torch)
        f = jitorch.compile(m)
        cf = f._compiled_call
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # reaching recompile_limit warns
            for step in range(3 * cf.recompile_limit):
                if step % 3 == 2:
                    m.mask = ref.mask = None
                x = RNG.standard_normal((2, 3)).astype(np.float32)
                xj, xt = jitorch.tensor(x, requires_grad=grad), torch.tensor(x, requires_grad=grad)
                out, expected = f(xj), ref(xt)
                _close(out, expected, atol=1e-5)
                if grad:
                    gy = RNG.standard_normal((2, 3)).astype(np.float32)
                    out.backward(jitorch.tensor(gy))
                    expected.backward(torch.tensor(gy))
                    _close(xj.grad, xt.grad, atol=1e-5)
        # (parameters require grad: training entries both times; past 8 refills the replay entry stays)
        assert not cf._fell_back and cf._compiles() <= 2


def test_an_invalidated_cache_with_a_small_recompile_limit_stays_compiled():
    m, ref = _lazy_mask_model(jitorch), _lazy_mask_model(torch)
    f = jitorch.compile(m, options={"recompile_limit": 2})
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    with jitorch.no_grad(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(8):
            if step in (2, 4, 6):
                m.mask = ref.mask = None
            _close(f(jitorch.tensor(x * step)), ref(torch.tensor(x * step)))
    assert not f._compiled_call._fell_back and f._compiled_call.entries[-1].replay is None


def test_plain_values_in_argument_dicts_and_nested_containers_changed_between_calls_are_read_again():
    f = jitorch.compile(lambda x, cfg: x * cfg["scale"] + float(cfg["tables"][0][1].sum()))
    cfg = {"scale": 2.0, "tables": collections.deque([[0, np.zeros(2)]])}
    x = _x(jitorch, None)
    for step in range(5):
        if step >= 2:
            cfg["scale"] = float(step)
            cfg["tables"][0][1][0] = step  # an array two containers down, in place
        _close(f(x, cfg), torch.tensor(x.tolist()) * cfg["scale"] + float(step if step >= 2 else 0))


CACHE = {"table": None}


def _cached_table(x):
    if CACHE["table"] is None:  # a global cache filled by the first call, cleared by the user
        CACHE["table"] = jitorch.arange(3, dtype=jitorch.float32) + 1
    return x * CACHE["table"]


def test_a_global_cache_cleared_many_times_stays_compiled():
    f = jitorch.compile(_cached_table, options={"recompile_limit": 3})
    x = _x(jitorch, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(10):
            if step % 2 == 1:
                CACHE["table"] = None
            _close(f(x), torch.tensor(x.tolist()) * torch.arange(1.0, 4.0))
    assert not f._fell_back


class Settings:
    def __init__(self, scale):
        self.scale, self.step = scale, 0


BLOCKS = [Settings(1.0) for _ in range(20)]


def _scaled_by_blocks(x):
    return x * BLOCKS[0].scale + BLOCKS[-1].scale


def test_attributes_of_objects_in_arguments_and_global_lists_changed_between_calls_are_read_again():
    f = jitorch.compile(lambda x, cfg, more: x * cfg.scale + more[1].scale)
    g = jitorch.compile(_scaled_by_blocks)
    cfg, more = Settings(2.0), [Settings(0.0), Settings(1.0)]
    x = _x(jitorch, None)
    xt = torch.tensor(x.tolist())
    for step in range(5):
        cfg.scale, more[1].scale, BLOCKS[0].scale, BLOCKS[-1].scale = 2.0 + step, -step, 1.0 + step, step / 2
        _close(f(x, cfg, more), xt * (2.0 + step) - step)
        _close(g(x), xt * (1.0 + step) + step / 2)


def test_an_argument_objects_attribute_the_code_never_reads_changing_every_call_keeps_one_entry():
    f = jitorch.compile(lambda x, cfg: x * cfg.scale)
    cfg = Settings(3.0)
    x = _x(jitorch, None)
    for step in range(12):
        cfg.step = step  # a counter the training loop keeps
        _close(f(x, cfg), torch.tensor(x.tolist()) * 3.0)
    assert len(f.entries) == 1 and not f._fell_back


def test_container_arguments_match_torch_compile():
    # Dynamo (backend="eager": its Python semantics, no Inductor compile) is the reference for what reaches the
    # caller's objects.
    def step(x, hs, q):
        hs.append(hs[0] + x * q[0])
        hs.count = len(hs)
        return hs[-1] * 2

    mine, theirs = jitorch.compile(step), torch.compile(step, backend="eager")
    hs_j, hs_t = TaggedList([jitorch.ones(3)]), TaggedList([torch.ones(3)])
    q_j, q_t = collections.deque([jitorch.ones(3)]), collections.deque([torch.ones(3)])
    for i in range(4):
        q_j[0], q_t[0] = jitorch.full((3,), float(i)), torch.full((3,), float(i))
        _close(mine(_x(jitorch, i), hs_j, q_j), theirs(_x(torch, i), hs_t, q_t))
    _close_all(hs_j, hs_t)
    assert hs_j.count == hs_t.count == 5
