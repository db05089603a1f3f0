"""The default device: ``set_default_device`` and ``with jitorch.device(...)`` blocks (nested, restored on errors),
as torch's; tensors and modules created inside land on it."""
from __future__ import annotations

import pytest
import torch

import jitorch


def test_device_block_sets_and_restores_the_default():
    assert jitorch.get_default_device() == jitorch.device("cpu")
    for lib in (jitorch, torch):
        with lib.device("cpu") as d:
            assert d == lib.device("cpu")
            assert lib.nn.Linear(2, 2).weight.device.type == "cpu" and lib.zeros(1).device.type == "cpu"
        assert lib.get_default_device() == lib.device("cpu")


def test_nested_blocks_and_errors_restore_the_enclosing_default():
    meta = jitorch.device("meta")  # a device no tensor is made on here: only the default is checked
    with jitorch.device("cpu"):
        with meta:
            assert jitorch.get_default_device() == meta
            with jitorch.device("cpu"):
                assert jitorch.get_default_device() == jitorch.device("cpu")
            assert jitorch.get_default_device() == meta
        assert jitorch.get_default_device() == jitorch.device("cpu")
    with pytest.raises(KeyError):
        with meta:
            raise KeyError("inside")
    assert jitorch.get_default_device() == jitorch.device("cpu")


def test_set_default_device_none_restores_the_cpu():
    jitorch.set_default_device("meta")
    try:
        assert jitorch.get_default_device().type == "meta"
    finally:
        jitorch.set_default_device(None)
    assert jitorch.get_default_device() == jitorch.device("cpu")
