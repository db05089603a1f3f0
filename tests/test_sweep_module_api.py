"""nn.Module state dicts against torch 2.13: ``state_dict`` arguments and ``_metadata``, ``load_state_dict``'s
results and errors, the state-dict hooks, versioned ``_load_from_state_dict`` overrides, and building on the meta
device (``to_empty``, ``skip_init``).

Each case is user code written once against ``lib``; ``same_behaviour`` compares what it returns, raises and warns.
"""
from __future__ import annotations

from collections import OrderedDict

import pytest
from module_api_compare import fixed_linear as _linear, same_behaviour


def prefix_and_keep_vars(lib):
    m = lib.nn.Sequential(_linear(lib, 2, 3), lib.nn.BatchNorm1d(3))
    sd = m.state_dict(prefix="p.", keep_vars=True)
    plain = m.state_dict()
    return ([(k, type(v).__name__, v.requires_grad) for k, v in sd.items()],
            [(k, type(v).__name__, v.requires_grad, v.tolist()) for k, v in plain.items()], list(sd._metadata.items()))


def metadata_versions(lib):
    class Versioned(lib.nn.Module):
        _version = 3

    m = lib.nn.Sequential(Versioned(), lib.nn.BatchNorm2d(2), lib.nn.LayerNorm(2))
    return list(m.state_dict(prefix="pp.")._metadata.items())


def destination_argument(lib):
    m = _linear(lib, 2, 3)
    d = OrderedDict()
    return m.state_dict(destination=d) is d, list(d), list(m.state_dict(None, "x."))


def incompatible_keys_result(lib):
    m = _linear(lib, 2, 3)
    r = m.load_state_dict({"weight": lib.zeros(3, 2), "zz": lib.zeros(1)}, strict=False)
    ok = m.load_state_dict(m.state_dict())
    return (repr(r), str(r), type(r).__name__, r.missing_keys, r.unexpected_keys, tuple(r), r == (["bias"], ["zz"]),
            repr(ok), str(ok))


def nested_unexpected_non_strict(lib):
    m = lib.nn.Sequential(_linear(lib, 1, 1))
    return repr(m.load_state_dict({"0.weight": lib.zeros(1, 1), "0.bias": lib.zeros(1), "1.weight": lib.zeros(1),
                                   "0.foo.bar": lib.zeros(1)}, strict=False))


def unexpected_keys_strict(lib):
    m = lib.nn.Sequential(_linear(lib, 1, 1))
    sd = m.state_dict()
    sd["0.weight.extra"], sd["0"], sd["weight"], sd["b.c"] = (lib.zeros(1),) * 4
    m.load_state_dict(sd)


def missing_and_size_mismatch(lib):
    m = lib.nn.Sequential(_linear(lib, 2, 3), lib.nn.BatchNorm1d(3))
    m.load_state_dict({"0.weight": lib.zeros(2, 2), "0.bias": lib.zeros(4), "1.weight": lib.zeros(3)})


def size_mismatch_non_strict_still_raises(lib):
    m = lib.nn.Sequential(_linear(lib, 2, 3))
    m.load_state_dict({"0.weight": lib.zeros(2, 2), "0.bias": lib.zeros(3)}, strict=False)


def non_tensor_entry(lib):
    _linear(lib, 2, 3).load_state_dict({"weight": [1, 2], "bias": lib.zeros(3)})


def not_a_mapping(lib):
    _linear(lib, 1, 1).load_state_dict([("weight", lib.zeros(1, 1))])


def values_cast_to_the_parameter(lib):
    m = _linear(lib, 2, 3)
    w = lib.ones(3, 2, dtype=lib.float64, requires_grad=True) * 2
    m.load_state_dict({"weight": w, "bias": lib.ones(3, dtype=lib.bool)})
    return str(m.weight.dtype), m.weight.tolist(), m.bias.tolist(), m.weight.grad_fn is None, m.weight.requires_grad


def assign_replaces_the_tensors(lib):
    m = _linear(lib, 2, 3)
    m.weight.requires_grad_(False)
    w = lib.ones(3, 2, dtype=lib.float64)
    m.load_state_dict({"weight": w, "bias": lib.zeros(3)}, assign=True)
    bn = lib.nn.BatchNorm1d(2)
    sd = bn.state_dict()
    sd["running_mean"] = lib.nn.Parameter(lib.ones(2))
    bn.load_state_dict(sd, assign=True)
    return (type(m.weight).__name__, m.weight.requires_grad, m.bias.requires_grad, str(m.weight.dtype),
            m.weight.data_ptr() == w.data_ptr(), type(bn.running_mean).__name__)


def assign_shape_mismatch(lib):
    _linear(lib, 2, 2).load_state_dict({"weight": lib.ones(3, 2), "bias": lib.zeros(2)}, assign=True)


def meta_module_loads_with_assign_only(lib):
    with lib.device("meta"):
        m = lib.nn.Linear(2, 3)
    m.load_state_dict({"weight": lib.ones(3, 2), "bias": lib.zeros(3)})  # warns: a no-op
    still_meta = str(m.weight.device)
    m.load_state_dict({"weight": lib.ones(3, 2), "bias": lib.zeros(3)}, assign=True)
    return still_meta, str(m.weight.device), m.weight.sum().item(), type(m.weight).__name__


def state_dict_hooks(lib):
    log = []
    m = lib.nn.Sequential(_linear(lib, 1, 1))
    handles = [m._register_state_dict_hook(lambda mod, sd, prefix, meta: log.append(("old", prefix, list(sd)))),
               m[0].register_state_dict_post_hook(lambda mod, sd, prefix, meta: log.append(("post", prefix, list(sd)))),
               m[0].register_state_dict_pre_hook(lambda mod, prefix, keep_vars: log.append(("pre", prefix, keep_vars)))]
    m.state_dict(prefix="x.", keep_vars=True)
    for h in handles:
        h.remove()
    m.state_dict()
    return log


def state_dict_hook_return_values(lib):
    legacy = lib.nn.Sequential(_linear(lib, 1, 1))
    legacy[0]._register_state_dict_hook(lambda mod, sd, prefix, meta: OrderedDict({"x": 1}))
    m = _linear(lib, 1, 1)

    def mutate(mod, sd, prefix, meta):
        sd[prefix + "extra"] = lib.zeros(1)
        meta["note"] = 1

    m.register_state_dict_post_hook(mutate)
    sd = m.state_dict()
    return list(legacy.state_dict()), list(sd), list(sd._metadata.items())


def public_post_hook_must_return_none(lib):
    m = _linear(lib, 1, 1)
    m.register_state_dict_post_hook(lambda mod, sd, prefix, meta: {"new": 1})
    m.state_dict()


def hook_order_over_the_tree(lib):
    log = []
    m = lib.nn.Sequential(lib.nn.Sequential(_linear(lib, 1, 1)))
    for name, mod in m.named_modules():
        mod.register_load_state_dict_post_hook(lambda mod, k, n=name: log.append(("post", n)))
        mod.register_load_state_dict_pre_hook(lambda mod, sd, prefix, *r, n=name: log.append(("pre", n, prefix)))
        mod.register_state_dict_pre_hook(lambda mod, prefix, kv, n=name: log.append(("sdpre", n, prefix)))
        mod.register_state_dict_post_hook(lambda mod, sd, prefix, meta, n=name: log.append(("sdpost", n, prefix)))
    m.load_state_dict(m.state_dict())
    return log


def load_pre_hook_signatures(lib):
    log = []
    m = lib.nn.Sequential(_linear(lib, 1, 1))
    m[0]._register_load_state_dict_pre_hook(lambda *a: log.append(("with_module", len(a), a[2])), with_module=True)
    m[0]._register_load_state_dict_pre_hook(lambda *a: log.append(("private", len(a), a[1])))
    m[0].register_load_state_dict_pre_hook(lambda *a: log.append(("public", len(a), a[2])))
    m.load_state_dict(m.state_dict())
    return log


def load_pre_hook_renames_keys(lib):
    m = lib.nn.Sequential(_linear(lib, 1, 1))

    def rename(mod, sd, prefix, local_metadata, strict, missing, unexpected, errors):
        for k in list(sd):
            if k.startswith(prefix + "old_"):
                sd[prefix + k[len(prefix) + 4:]] = sd.pop(k)

    m[0].register_load_state_dict_pre_hook(rename)
    given = {"0.old_weight": lib.full((1, 1), 2.0), "0.old_bias": lib.zeros(1)}
    return repr(m.load_state_dict(given)), m[0].weight.item(), list(given)  # the caller's dict is not edited


def load_pre_hook_reports_errors(lib):
    m = _linear(lib, 1, 1)
    m.register_load_state_dict_pre_hook(lambda mod, sd, p, meta, strict, miss, unexp, errs: errs.append("custom"))
    m.load_state_dict(m.state_dict())


def load_post_hook_edits_keys(lib):
    m = _linear(lib, 1, 1)
    log = []

    def hook(mod, keys):
        log.append((list(keys.missing_keys), list(keys.unexpected_keys)))
        keys.unexpected_keys.clear()
        keys.missing_keys.append("fake")

    m.register_load_state_dict_post_hook(hook)
    log.append(repr(m.load_state_dict({"weight": lib.zeros(1, 1), "bias": lib.zeros(1), "zz": lib.zeros(1)},
                                      strict=False)))
    try:
        m.load_state_dict(m.state_dict())
    except RuntimeError as e:
        log.append(str(e))
    return log


def load_post_hook_must_return_none(lib):
    m = _linear(lib, 1, 1)
    m.register_load_state_dict_post_hook(lambda mod, keys: 5)
    m.load_state_dict(m.state_dict())


def batch_norm_back_compat(lib):
    m = lib.nn.BatchNorm1d(3)
    m.num_batches_tracked.fill_(5)
    old = m.state_dict()
    del old["num_batches_tracked"]
    old._metadata[""]["version"] = 1  # from before num_batches_tracked: the module's counter stays
    result = [repr(m.load_state_dict(old)), m.num_batches_tracked.item(), str(m.num_batches_tracked.dtype)]
    no_meta = OrderedDict(old)  # no metadata at all: also treated as old
    m.num_batches_tracked.fill_(5)
    result += [repr(m.load_state_dict(no_meta)), m.num_batches_tracked.item()]
    sd = m.state_dict()
    sd["num_batches_tracked"] = lib.tensor([7])  # shape (1,) fills the 0-d counter
    m.load_state_dict(sd)
    result.append((m.num_batches_tracked.item(), tuple(m.num_batches_tracked.shape)))
    current = m.state_dict()
    del current["num_batches_tracked"]  # a current-version checkpoint must have it
    try:
        m.load_state_dict(current)
    except RuntimeError as e:
        result.append(str(e))
    return result


def versioned_load_override(lib):
    log = []

    class Renamed(lib.nn.Module):
        _version = 2

        def __init__(self):
            super().__init__()
            self.w = lib.nn.Parameter(lib.zeros(2))

        def _load_from_state_dict(self, sd, prefix, local_metadata, strict, missing, unexpected, errors):
            log.append((prefix, dict(local_metadata)))
            if local_metadata.get("version", None) is None or local_metadata["version"] < 2:
                if prefix + "old_w" in sd:
                    sd[prefix + "w"] = sd.pop(prefix + "old_w")
            super()._load_from_state_dict(sd, prefix, local_metadata, strict, missing, unexpected, errors)

    m = lib.nn.Sequential(Renamed())
    result = repr(m.load_state_dict(OrderedDict({"0.old_w": lib.ones(2)})))
    m.load_state_dict(m.state_dict(), assign=True)
    return result, m[0].w.tolist(), list(m.state_dict()._metadata.items()), log


def to_empty_keeps_kinds(lib):
    m = lib.nn.BatchNorm1d(3)
    m.weight.requires_grad_(False)
    r = m.to_empty(device="cpu")
    return r is m, [(n, type(t).__name__, t.requires_grad, str(t.dtype), tuple(t.shape))
                    for n, t in m.state_dict(keep_vars=True).items()]


def to_empty_device_is_keyword_only(lib):
    lib.nn.Linear(1, 1).to_empty("cpu")


def meta_build_then_reset_parameters(lib):
    with lib.device("meta"):
        m = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.BatchNorm1d(3))
        made_inside = lib.ones(2)
    meta = (str(m[0].weight.device), m[0].weight.is_meta, str(made_inside.device), repr(m[0].weight))
    m.to_empty(device="cpu", recurse=True)
    for layer in m:
        layer.reset_parameters()
    return meta, [(n, str(p.device), tuple(p.shape)) for n, p in m.state_dict().items()], m[1].running_var.tolist()


def to_empty_without_recursion(lib):
    m = lib.nn.Sequential(lib.nn.Linear(2, 3, device="meta"))
    m.register_buffer("b", lib.zeros(1, device="meta"))
    m.to_empty(device="cpu", recurse=False)
    return str(m.b.device), str(m[0].weight.device)


def meta_module_cannot_move_with_to(lib):
    with lib.device("meta"):
        m = lib.nn.Linear(3, 2)
    m.to("cpu")


def skip_init_builds_on_meta(lib):
    made = [lib.nn.utils.skip_init(lib.nn.Linear, 2, 3, bias=False),
            lib.nn.utils.skip_init(lib.nn.BatchNorm2d, 3, dtype=lib.float64)]
    return [(type(m).__name__, [(k, tuple(v.shape), str(v.device), str(v.dtype), type(v).__name__)
                                for k, v in m.state_dict(keep_vars=True).items()]) for m in made]


def skip_init_refuses_a_non_module(lib):
    lib.nn.utils.skip_init(int, 2)


def skip_init_needs_a_device_argument(lib):
    class NoDevice(lib.nn.Module):
        def __init__(self):
            super().__init__()

    lib.nn.utils.skip_init(NoDevice)


def functional_call_leaves_the_module(lib):
    m = _linear(lib, 2, 1)
    out = lib.func.functional_call(m, {"weight": lib.ones(1, 2), "bias": lib.ones(1)}, (lib.ones(1, 2),))
    legacy = lib.nn.utils.stateless.functional_call(m, {"weight": lib.ones(1, 2)}, lib.ones(1, 2))  # warns
    return out.tolist(), legacy.tolist(), m.weight.tolist()


CASES = [prefix_and_keep_vars, metadata_versions, destination_argument, incompatible_keys_result,
         nested_unexpected_non_strict, unexpected_keys_strict, missing_and_size_mismatch,
         size_mismatch_non_strict_still_raises, non_tensor_entry, not_a_mapping, values_cast_to_the_parameter,
         assign_replaces_the_tensors, assign_shape_mismatch, meta_module_loads_with_assign_only, state_dict_hooks,
         state_dict_hook_return_values, public_post_hook_must_return_none, hook_order_over_the_tree,
         load_pre_hook_signatures, load_pre_hook_renames_keys, load_pre_hook_reports_errors,
         load_post_hook_edits_keys, load_post_hook_must_return_none, batch_norm_back_compat,
         versioned_load_override, to_empty_keeps_kinds, to_empty_device_is_keyword_only,
         meta_build_then_reset_parameters, to_empty_without_recursion, meta_module_cannot_move_with_to,
         skip_init_builds_on_meta, skip_init_refuses_a_non_module, skip_init_needs_a_device_argument,
         functional_call_leaves_the_module]


@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__)
def test_module_state_api_matches_torch(case):
    same_behaviour(case)


def test_cases_exercise_errors_and_warnings():
    """The comparison is not vacuous: these cases raise or warn in torch (and so must in jitorch)."""
    for case, marker in ((missing_and_size_mismatch, "size mismatch for 0.bias"),
                         (meta_module_loads_with_assign_only, "copying from a non-meta parameter"),
                         (meta_module_cannot_move_with_to, "Module.to_empty() instead of"),
                         (skip_init_refuses_a_non_module, "Expected a Module; got <class 'int'>")):
        assert marker in same_behaviour(case)
