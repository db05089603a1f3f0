"""What the volumetric / spatial-transformer / optical-flow sweep found jitorch accepting or reporting differently
from torch 2.13: ``grid_sample``'s argument checks (ATen's order and words), ``affine_grid``'s batch check and
unit-size warning (and warnings attributed to the caller's line), nearest ``interpolate`` of integer label maps,
``cross_entropy`` on spatial uint8 targets or with a weight that requires grad, ``meshgrid``'s input checks and the
reflection pad's argument number."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch
from sweep_helpers import LIBS, assert_runs_match


def same_error_prefix(fn):
    """``fn(lib)`` raises the same exception type in both libraries and jitorch's message starts with torch's
    (jitorch may add the shapes and the fix after it)."""
    errors = []
    for lib in LIBS:
        with pytest.raises(Exception) as info:
            fn(lib)
        errors.append(info.value)
    assert type(errors[1]) is type(errors[0]), errors
    assert str(errors[1]).replace("jitorch.", "torch.").startswith(str(errors[0])), errors
    return errors[1]


def F(lib):
    return lib.nn.functional


GRID_SAMPLE_ERRORS = {
    "grid-dtype": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 3), lib.zeros(1, 2, 2, 2, dtype=lib.float64),
                                                 align_corners=False),
    "input-dtype": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 3, dtype=lib.float64), lib.zeros(1, 2, 2, 2),
                                                  align_corners=False),
    "batch": lambda lib: F(lib).grid_sample(lib.zeros(2, 1, 3, 3), lib.zeros(1, 2, 2, 2), align_corners=False),
    "last-dim-2d": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 3), lib.zeros(1, 2, 2, 3), align_corners=False),
    "last-dim-3d": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 3, 3), lib.zeros(1, 2, 2, 2, 2),
                                                  align_corners=False),
    "empty-spatial": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 0, 3), lib.zeros(1, 2, 2, 2, 3),
                                                    align_corners=False),
    "int-2d": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 3, dtype=lib.int64), lib.zeros(1, 2, 2, 2),
                                             align_corners=False),
    "int-3d": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 3, 3, dtype=lib.int32), lib.zeros(1, 2, 2, 2, 3),
                                             align_corners=False),
    "grid-4d-for-5d": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 3, 3), lib.zeros(1, 2, 2, 3),
                                                     align_corners=False),
    "input-3d": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3), lib.zeros(1, 2, 1), align_corners=False),
    "bicubic-3d": lambda lib: F(lib).grid_sample(lib.zeros(1, 1, 3, 3, 3), lib.zeros(1, 2, 2, 2, 3), mode="bicubic",
                                                 align_corners=False),
    "theta-batch": lambda lib: F(lib).affine_grid(lib.zeros(2, 2, 3), (1, 1, 3, 3), align_corners=False),
    "size-3": lambda lib: F(lib).affine_grid(lib.zeros(1, 2, 3), (1, 1, 3), align_corners=False),
    "size-batch": lambda lib: F(lib).affine_grid(lib.zeros(1, 3, 4), (2, 1, 3, 3, 3), align_corners=False),
}


@pytest.mark.parametrize("case", list(GRID_SAMPLE_ERRORS))
def test_grid_sample_and_affine_grid_refuse_as_torch(case):
    same_error_prefix(GRID_SAMPLE_ERRORS[case])


def test_grid_sample_dtype_error_names_both_dtypes():
    err = same_error_prefix(GRID_SAMPLE_ERRORS["grid-dtype"])
    assert "jitorch.float32" in str(err) and "jitorch.float64" in str(err)


@pytest.mark.parametrize("align_corners", [True, False])
def test_affine_grid_unit_size_warning_at_the_callers_line(align_corners):
    caught = []
    for lib in LIBS:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            grid = F(lib).affine_grid(lib.eye(2, 3)[None], (1, 1, 1, 4), align_corners=align_corners)
        caught.append([(str(w.message), w.filename) for w in record])
        assert grid.shape == (1, 1, 4, 2)
    assert caught[1] == caught[0]
    assert all(name == __file__ for _, name in caught[1])
    assert len(caught[1]) == int(align_corners)


def test_default_align_corners_warning_at_the_callers_line():
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0") as record:
        grid = F(jitorch).affine_grid(jitorch.eye(2, 3)[None], (1, 1, 2, 2))
        F(jitorch).grid_sample(jitorch.ones(1, 1, 2, 2), grid)
    assert [w.filename for w in record] == [__file__, __file__]


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("shape", [(1, 2, 4), (2, 1, 3, 4), (2, 1, 2, 3, 4)], ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_interpolate_refuses_integer_label_maps(dtype, shape, mode):
    err = same_error_prefix(lambda lib: F(lib).interpolate(lib.zeros(shape, dtype=getattr(lib, dtype)),
                                                           scale_factor=2, mode=mode))
    assert "x.float()" in str(err)


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_nearest_interpolate_of_label_maps_matches_torch(dtype):
    labels = np.random.default_rng(0).integers(0, 4, (2, 1, 5, 6, 7)).astype(dtype)
    # the deep-supervision targets of nnU-Net: the label map resized as float and cast back
    run = lambda lib: [F(lib).interpolate(lib.tensor(labels), scale_factor=0.5, mode="nearest"),  # noqa: E731
                       F(lib).interpolate(lib.tensor(labels).float(), size=(3, 4, 5)).long()]
    assert_runs_match(run(torch), run(jitorch))


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 3, 4, 5), (2, 3, 2, 3, 4)], ids=["1d", "2d", "3d"])
def test_cross_entropy_refuses_spatial_uint8_targets(shape):
    target = np.zeros((shape[0],) + shape[2:], np.uint8)
    err = same_error_prefix(lambda lib: F(lib).cross_entropy(lib.zeros(shape), lib.tensor(target)))
    assert "target.long()" in str(err)


def test_cross_entropy_uint8_targets_without_spatial_dims_match_torch():
    logits = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    run = lambda lib: F(lib).cross_entropy(lib.tensor(logits), lib.tensor([0, 2, 1, 1], dtype=lib.uint8))  # noqa
    assert_runs_match(run(torch), run(jitorch))


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4, 5)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_class_weight_requiring_grad_is_refused_unless_no_grad(shape, smoothing):
    logits = np.random.default_rng(2).normal(size=shape).astype(np.float32)
    target = np.random.default_rng(3).integers(0, 3, (shape[0],) + shape[2:])

    def loss(lib):
        return F(lib).cross_entropy(lib.tensor(logits), lib.tensor(target), weight=lib.ones(3, requires_grad=True),
                                    label_smoothing=smoothing)
    same_error_prefix(loss)

    def no_grad_loss(lib):
        with lib.no_grad():
            return loss(lib)
    assert_runs_match(no_grad_loss(torch), no_grad_loss(jitorch))


MESHGRID_ERRORS = {
    "empty": lambda lib: lib.meshgrid(indexing="ij"),
    "2-d": lambda lib: lib.meshgrid(lib.zeros(2, 2), lib.zeros(3), indexing="ij"),
    "dtypes": lambda lib: lib.meshgrid(lib.zeros(2), lib.zeros(3, dtype=lib.float64), indexing="xy"),
    "devices": lambda lib: lib.meshgrid(lib.zeros(2), lib.zeros(3, device="meta"), indexing="ij"),
}


@pytest.mark.parametrize("case", list(MESHGRID_ERRORS))
def test_meshgrid_refuses_as_torch(case):
    errors = []
    for lib in LIBS:
        with pytest.raises(RuntimeError) as info:
            MESHGRID_ERRORS[case](lib)
        errors.append(str(info.value))
    # torch prints the offending 2-D tensor itself; jitorch names its shape and position
    prefix = errors[0].split(" but got")[0] if case == "2-d" else errors[0]
    assert errors[1].startswith(prefix), errors


@pytest.mark.parametrize("shape,pad", [((1, 1, 2, 2, 2), (2, 2, 0, 0, 0, 0)), ((1, 1, 2, 2, 2), (0, 0, 2, 2, 0, 0)),
                                       ((1, 1, 2, 2, 2), (0, 0, 0, 0, 2, 2)), ((1, 1, 2, 2, 2), (2, 2, 2, 2, 2, 2)),
                                       ((1, 2, 2), (0, 0, 2, 2)), ((1, 1, 2, 2), (2, 2, 0, 0)), ((1, 2, 2), (2, 2))])
def test_reflect_pad_names_the_argument_as_torch(shape, pad):
    same_error_prefix(lambda lib: F(lib).pad(lib.zeros(shape), pad, mode="reflect"))


@pytest.mark.parametrize("nd,mode,padding", [(2, 0, 2), (2, 2, 1), (3, 1, 0), (3, 0, 2)])
def test_aten_grid_sampler_nd_and_affine_grid_generator_match_torch(nd, mode, padding):
    rng = np.random.default_rng(7)
    size = [2, 3, 4, 5, 6][:nd + 2]
    x = rng.normal(size=size).astype(np.float32)
    theta = (np.eye(nd, nd + 1) + 0.2 * rng.normal(size=(2, nd, nd + 1))).astype(np.float32)
    upstream = rng.normal(size=[2, 3] + size[2:]).astype(np.float32)

    def run(lib):
        xt, tt = lib.tensor(x, requires_grad=True), lib.tensor(theta, requires_grad=True)
        grid = lib.affine_grid_generator(tt, size, True)
        sampler = lib.grid_sampler_2d if nd == 2 else lib.grid_sampler_3d
        out = sampler(xt, grid, mode, padding, False)
        return [grid, out, *lib.autograd.grad(out, [xt, tt], lib.tensor(upstream))]
    assert_runs_match(run(torch), run(jitorch), rtol=1e-5, atol=1e-5)


ATEN_SAMPLER_ERRORS = {
    "2d-on-5d": lambda lib: lib.grid_sampler_2d(lib.zeros(1, 1, 2, 2, 2), lib.zeros(1, 1, 1, 1, 3), 0, 0, False),
    "3d-on-4d": lambda lib: lib.grid_sampler_3d(lib.zeros(1, 1, 2, 2), lib.zeros(1, 1, 1, 2), 0, 0, False),
    "3d-bicubic": lambda lib: lib.grid_sampler_3d(lib.zeros(1, 1, 2, 2, 2), lib.zeros(1, 1, 1, 1, 3), 2, 0, False),
    # a theta of the wrong shape or batch fails in torch's bmm of the base grid with it
    "generator-theta": lambda lib: lib.affine_grid_generator(lib.zeros(1, 2, 3), [1, 1, 2, 2, 2], False),
    "generator-batch": lambda lib: lib.affine_grid_generator(lib.zeros(3, 2, 3), [2, 1, 2, 2], False),
    "generator-size": lambda lib: lib.affine_grid_generator(lib.zeros(1, 2, 3), [1, 1, 2], False),
}


@pytest.mark.parametrize("case", list(ATEN_SAMPLER_ERRORS))
def test_aten_grid_sampler_nd_and_affine_grid_generator_refuse_as_torch(case):
    same_error_prefix(ATEN_SAMPLER_ERRORS[case])


TARGET_SHAPE_ERRORS = {
    # a U-Net whose output was not cropped to the label map, labels with a channel dim, soft labels of another shape
    "5d-uncropped": lambda lib: F(lib).cross_entropy(lib.zeros(2, 3, 4, 4, 4), lib.zeros(2, 4, 4, dtype=lib.long)),
    "5d-channel": lambda lib: F(lib).cross_entropy(lib.zeros(2, 3, 4, 4, 4), lib.zeros(2, 1, 4, 4, 4,
                                                                                       dtype=lib.long)),
    "5d-soft-labels": lambda lib: F(lib).cross_entropy(lib.zeros(2, 3, 4, 4, 4), lib.zeros(2, 3, 4, 4, 5)),
    "3d-soft-labels": lambda lib: F(lib).cross_entropy(lib.zeros(2, 3, 4), lib.zeros(2, 3, 5)),
    "4d": lambda lib: F(lib).cross_entropy(lib.zeros(2, 3, 4, 4), lib.zeros(2, 4, 5, dtype=lib.long)),
    "4d-float": lambda lib: F(lib).cross_entropy(lib.zeros(2, 3, 4, 4), lib.zeros(2, 4, 5)),
    "2d-multi-target": lambda lib: F(lib).nll_loss(lib.zeros(2, 3), lib.zeros(2, 5, dtype=lib.long)),
    "6d": lambda lib: F(lib).nll_loss(lib.zeros(2, 3, 2, 2, 2, 2), lib.zeros(2, 2, 2, 2, 3, dtype=lib.long)),
}


@pytest.mark.parametrize("case", list(TARGET_SHAPE_ERRORS))
def test_loss_target_shape_errors_read_as_torch(case):
    same_error_prefix(TARGET_SHAPE_ERRORS[case])


@pytest.mark.parametrize("shape,kernel,padding", [((1, 2, 2, 2, 2), 3, 1), ((2, 3, 3, 3), (3, 4, 3), (1, 2, 1)),
                                                  ((1, 1, 4, 4, 2), 3, 1)])
def test_avg_pool3d_refuses_an_input_smaller_than_its_window_as_torch(shape, kernel, padding):
    same_error_prefix(lambda lib: F(lib).avg_pool3d(lib.zeros(shape), kernel, padding=padding))


def test_avg_pool3d_window_as_large_as_the_input_matches_torch():
    x = np.random.default_rng(8).normal(size=(1, 2, 3, 4, 3)).astype(np.float32)
    run = lambda lib: F(lib).avg_pool3d(lib.tensor(x), 3, stride=4, padding=1, ceil_mode=True)  # noqa: E731
    assert_runs_match(run(torch), run(jitorch))
