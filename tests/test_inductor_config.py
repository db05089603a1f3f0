"""``torch._inductor.config`` as scripts touch it, and every Inductor option name torch 2.13 accepts in
``compile(options=...)``: set, read back, patched for a block, and changing nothing about the results."""
from __future__ import annotations

import pytest
import torch._inductor.config as torch_config

import jitorch
from jitorch._inductor import config


def test_every_public_inductor_option_of_torch_is_known():
    public = {k for k in torch_config._config if not any(p.startswith("_") for p in k.split("."))}
    assert public - {"TYPE_CHECKING"} <= config.OPTION_NAMES


def test_flags_set_read_back_and_patched():
    jitorch._inductor.config.coordinate_descent_tuning = True
    jitorch._inductor.config.triton.unique_kernel_names = True
    assert config.coordinate_descent_tuning is True and config.triton.unique_kernel_names is True
    with config.patch(max_autotune=True):
        assert config.max_autotune is True
    assert config.max_autotune is None
    with pytest.raises(AttributeError):
        config.not_an_inductor_option  # noqa: B018


def test_compile_accepts_inductor_options_and_refuses_others():
    options = {"fx_graph_cache": True, "dce": True, "conv_1x1_as_mm": True, "split_reductions": True,
               "compile_threads": 1, "triton.unique_kernel_names": True, "max_autotune": True}
    f = jitorch.compile(lambda x: x * 2 + 1, options=options)
    assert f(jitorch.ones(2)).tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="unexpected optimization option"):
        jitorch.compile(lambda x: x, options={"nonsense_option": 1})
