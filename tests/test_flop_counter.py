"""``jitorch.utils.flop_counter.FlopCounterMode`` and ``module_tracker.ModuleTracker`` against PyTorch 2.13's: the
FLOPs and ATen op names of products, einsums, linear layers and convolutions (forward and backward, every layout
torch distinguishes), per-module counts, custom formulas, the printed table, and the tracker's module names."""
import numpy as np
import pytest
import torch
import torch.utils.flop_counter
import torch.utils.module_tracker

import jitorch
import jitorch.utils.flop_counter
import jitorch.utils.module_tracker
from sweep_helpers import copy_weights


def _counts(lib, fn, backward=False):
    with lib.utils.flop_counter.FlopCounterMode(display=False) as counter:
        out = fn(lib)
        if backward:
            out.sum().backward()
    return {k: {str(op): n for op, n in ops.items()} for k, ops in counter.get_flop_counts().items()}


def _r(lib, *shape, grad=False):
    data = np.random.default_rng(len(shape) * 7 + sum(shape)).standard_normal(shape).astype(np.float32)
    return lib.tensor(data, requires_grad=grad)


PRODUCTS = {
    "mm": lambda L: _r(L, 3, 4) @ _r(L, 4, 5),
    "vec_mat": lambda L: _r(L, 4) @ _r(L, 4, 5),
    "mat_vec": lambda L: _r(L, 3, 4) @ _r(L, 4),
    "dot": lambda L: _r(L, 4) @ _r(L, 4),
    "batch_mat": lambda L: _r(L, 2, 3, 4) @ _r(L, 4, 5),
    "batch_vec": lambda L: _r(L, 2, 3, 4) @ _r(L, 4),
    "vec_batch": lambda L: _r(L, 4) @ _r(L, 2, 4, 5),
    "bmm": lambda L: L.bmm(_r(L, 2, 3, 4), _r(L, 2, 4, 3)),
    "broadcast_batches": lambda L: _r(L, 1, 3, 4) @ _r(L, 2, 4, 5),
    "4d_by_3d": lambda L: _r(L, 2, 2, 3, 4) @ _r(L, 2, 4, 5),
    "4d_by_2d": lambda L: _r(L, 2, 2, 3, 4) @ _r(L, 4, 5),
    "strided_batch_mat": lambda L: _r(L, 3, 2, 4).transpose(0, 1) @ _r(L, 4, 5),
    "strided_batch_vec": lambda L: _r(L, 3, 2, 4).transpose(0, 1) @ _r(L, 4),
    "mat_batch": lambda L: _r(L, 3, 4) @ _r(L, 2, 4, 5),
    "mat_batch_grads": lambda L: _r(L, 3, 4, grad=True) @ _r(L, 2, 4, 5, grad=True),
    "batch_mat_grad": lambda L: _r(L, 3, 2, 4).transpose(0, 1) @ _r(L, 4, 5, grad=True),
    "linear_2d_bias": lambda L: L.nn.functional.linear(_r(L, 3, 4), _r(L, 5, 4), _r(L, 5)),
    "linear_3d_bias": lambda L: L.nn.functional.linear(_r(L, 2, 3, 4), _r(L, 5, 4), _r(L, 5)),
    "linear_3d_strided": lambda L: L.nn.functional.linear(_r(L, 3, 2, 4).transpose(0, 1), _r(L, 5, 4), _r(L, 5)),
    "linear_4d_bias": lambda L: L.nn.functional.linear(_r(L, 2, 2, 3, 4), _r(L, 5, 4), _r(L, 5)),
    "linear_no_bias": lambda L: L.nn.functional.linear(_r(L, 2, 3, 4), _r(L, 5, 4)),
    "linear_1d": lambda L: L.nn.functional.linear(_r(L, 4), _r(L, 5, 4), _r(L, 5)),
    "outer": lambda L: L.outer(_r(L, 3), _r(L, 4)),
    "einsum_mm": lambda L: L.einsum("ij,jk->ik", _r(L, 3, 4), _r(L, 4, 5)),
    "einsum_batched": lambda L: L.einsum("bhqd,bhkd->bhqk", _r(L, 2, 3, 5, 4), _r(L, 2, 3, 6, 4)),
    "einsum_three": lambda L: L.einsum("bij,jk,bk->bi", _r(L, 2, 3, 4), _r(L, 4, 5), _r(L, 2, 5)),
    "einsum_sum_first": lambda L: L.einsum("ij,jk->i", _r(L, 3, 4), _r(L, 4, 5)),
    "einsum_dot": lambda L: L.einsum("i,i->", _r(L, 3), _r(L, 3)),
    "einsum_outer": lambda L: L.einsum("i,j->ij", _r(L, 3), _r(L, 4)),
    "einsum_implicit_ellipsis": lambda L: L.einsum("...ij,...jk", _r(L, 2, 3, 4), _r(L, 2, 4, 5)),
    "einsum_one_operand": lambda L: L.einsum("ij->ji", _r(L, 3, 4)),
    "attention_on_cpu": lambda L: L.nn.functional.scaled_dot_product_attention(*(_r(L, 2, 4, 5, 8),) * 3),
}


@pytest.mark.parametrize("name", list(PRODUCTS))
def test_products_count_as_torchs_aten_calls(name):
    assert _counts(torch, PRODUCTS[name]) == _counts(jitorch, PRODUCTS[name])


TRAINED = {
    "mm": lambda L: _r(L, 3, 4, grad=True) @ _r(L, 4, 5, grad=True),
    "bmm": lambda L: L.bmm(_r(L, 2, 3, 4, grad=True), _r(L, 2, 4, 3, grad=True)),
    "linear": lambda L: L.nn.functional.linear(_r(L, 2, 3, 4, grad=True), _r(L, 5, 4, grad=True), _r(L, 5)),
    "linear_weight_only": lambda L: L.nn.functional.linear(_r(L, 3, 4), _r(L, 5, 4, grad=True)),
    "attention": lambda L: L.nn.functional.scaled_dot_product_attention(*(_r(L, 2, 4, 5, 8, grad=True),) * 3),
}
CONVS = {
    "conv2d": lambda L: L.nn.functional.conv2d(_r(L, 2, 4, 9, 9, grad=True), _r(L, 6, 2, 3, 3, grad=True),
                                               stride=2, padding=1, groups=2),
    "conv1d_dilated": lambda L: L.nn.functional.conv1d(_r(L, 2, 4, 11, grad=True), _r(L, 6, 4, 3, grad=True),
                                                       dilation=2),
    "conv3d_input_only": lambda L: L.nn.functional.conv3d(_r(L, 1, 2, 5, 5, 5, grad=True), _r(L, 3, 2, 2, 2, 2)),
    "conv_weight_only": lambda L: L.nn.functional.conv2d(_r(L, 2, 3, 7, 7), _r(L, 4, 3, 3, 3, grad=True)),
    "conv_transpose2d": lambda L: L.nn.functional.conv_transpose2d(_r(L, 2, 4, 5, 5, grad=True),
                                                                   _r(L, 4, 3, 3, 3, grad=True), stride=2, groups=2),
    "conv_transpose1d": lambda L: L.nn.functional.conv_transpose1d(_r(L, 2, 3, 6, grad=True),
                                                                   _r(L, 3, 5, 4, grad=True), padding=1),
}


@pytest.mark.parametrize("name", list(TRAINED) + list(CONVS))
def test_forward_and_backward_count_as_torchs(name):
    fn = {**TRAINED, **CONVS}[name]
    assert _counts(torch, fn, backward=True) == _counts(jitorch, fn, backward=True)


def test_per_module_counts_through_forward_and_backward_match_torch():
    def build(lib):
        nn = lib.nn
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                             nn.Sequential(nn.Conv2d(8, 8, 3), nn.Flatten()), nn.Linear(8 * 14 * 14, 4))

    torch.manual_seed(0)
    ref, mine = build(torch), build(jitorch)
    copy_weights(ref, mine)
    assert _counts(torch, lambda L: ref(_r(L, 2, 3, 16, 16)), backward=True) == \
        _counts(jitorch, lambda L: mine(_r(L, 2, 3, 16, 16)), backward=True)


def test_custom_formulas_and_the_mods_warning():
    def run(lib):
        fc = lib.utils.flop_counter
        with pytest.warns(UserWarning, match="mods argument is not needed anymore"):
            counter = fc.FlopCounterMode(lib.nn.Linear(2, 2), display=False,
                                         custom_mapping={fc.aten.mm: lambda a, b, out_shape=None, **kw: 7})
        with counter:
            lib.ones(3, 4) @ lib.ones(4, 5)
            lib.nn.functional.linear(lib.ones(3, 4), lib.ones(5, 4), lib.ones(5))
        return {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}

    assert run(torch) == run(jitorch) == {"aten.mm": 7, "aten.addmm": 120}


def test_printed_table_is_torchs():
    # torch prints through tabulate, asking it to keep leading spaces (numbers shown as numbers, right-aligned).
    counter = jitorch.utils.flop_counter.FlopCounterMode(display=False)
    model = jitorch.nn.Sequential(jitorch.nn.Linear(300, 4000), jitorch.nn.Linear(4000, 2, bias=False))
    with counter:
        model(jitorch.ones(20, 300))
        jitorch.ones(3, 4) @ jitorch.ones(4, 5)
    assert counter.get_table().splitlines() == [
        "Module              FLOP    % Total",
        "---------------  -------  ---------",
        "Global           48.320M    100.00%",
        " - aten.addmm    48.000M     99.34%",
        " - aten.mm        0.320M      0.66%",
        " Sequential      48.320M    100.00%",
        "  - aten.addmm   48.000M     99.34%",
        "  - aten.mm       0.320M      0.66%",
        "  Sequential.0   48.000M     99.34%",
        "   - aten.addmm  48.000M     99.34%",
        "  Sequential.1    0.320M      0.66%",
        "   - aten.mm      0.320M      0.66%",
    ]
    empty = jitorch.utils.flop_counter.FlopCounterMode(display=False)
    with empty:
        pass
    assert empty.get_table().splitlines() == ["Module      FLOP    % Total", "--------  ------  ---------",
                                              "Global         0         0%"]


def test_module_tracker_names_modules_in_forward_and_backward_as_torch():
    def run(lib):
        nn = lib.nn
        model = nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
        seen = []
        with lib.utils.module_tracker.ModuleTracker() as tracker:
            model[1][1].register_forward_pre_hook(lambda *a: seen.append(("fwd", sorted(tracker.parents),
                                                                          tracker.is_bw)))
            h = model[1][0](model[0](lib.ones(2, 3, requires_grad=True)))
            h.register_hook(lambda g: seen.append(("bwd", sorted(tracker.parents), tracker.is_bw)))
            model[1][1](h).sum().backward()
            seen.append(("after", sorted(tracker.parents), tracker.is_bw))
        return seen

    assert run(torch) == run(jitorch)
