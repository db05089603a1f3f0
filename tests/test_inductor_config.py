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


def test_flags_set_read_back_and_patched(monkeypatch):
    for owner, name in ((config, "coordinate_descent_tuning"), (config.triton, "unique_kernel_names")):
        # recorded so the flags are put back after the test (deleted again if they were unset), not left for others
        monkeypatch.setitem(vars(owner), name, vars(owner).get(name))
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


# Patched flags as torch 2.13 patches them: each form, dotted keys, read inside and after, both libraries side by side.
KEYS = {"max_autotune": True, "triton.cudagraphs": True, "cpp.threads": 3, "coordinate_descent_tuning": True}


def _read(cfg, key):
    owner = cfg
    for part in key.split("."):
        owner = getattr(owner, part)
    return owner


def _read_all(cfg):
    return {key: _read(cfg, key) for key in KEYS}


def _is_set(key):
    """Whether jitorch holds a value for ``key`` (else it reads as its unset default)."""
    path, _, name = key.rpartition(".")
    return name in vars(_read(config, path) if path else config)


def _same_start():
    """A jitorch patch giving every key torch's current value, so both libraries start (and end) alike."""
    return config.patch({key: _read(torch_config, key) for key in KEYS})


@pytest.mark.parametrize("form", ["dict", "kwargs", "pair", "decorator"])
def test_patch_matches_torch_inside_and_after(form):
    inner = {"triton.cudagraphs": False, "cpp.threads": 2}
    own = {key: _is_set(key) for key in KEYS}
    values = _read_all(config)
    with _same_start():
        before = _read_all(torch_config)
        assert _read_all(config) == before
        seen = {}
        for name, cfg in (("torch", torch_config), ("jitorch", config)):
            if form == "dict":
                with cfg.patch(dict(KEYS)):
                    seen[name] = [_read_all(cfg)]
                    with cfg.patch(inner):
                        seen[name].append(_read_all(cfg))
                    seen[name].append(_read_all(cfg))
            elif form == "kwargs":
                with cfg.patch(max_autotune=True, coordinate_descent_tuning=True):
                    seen[name] = [_read_all(cfg)]
            elif form == "pair":
                with cfg.patch("triton.cudagraphs", True):
                    seen[name] = [_read_all(cfg)]
            else:
                @cfg.patch({"cpp.threads": 5, "max_autotune": True})
                def depth(n, cfg=cfg):
                    return [_read_all(cfg)] + (depth(n - 1) if n else [])

                seen[name] = depth(2)
            seen[name].append(_read_all(cfg))
        assert seen["jitorch"] == seen["torch"]
        assert seen["jitorch"][-1] == before
    assert _read_all(config) == values
    assert own == {key: _is_set(key) for key in KEYS}


def test_patch_restores_after_an_exception_and_leaves_unset_flags_unset():
    keys = ("triton.max_tiles", "cpp.simdlen")  # flags nothing else in the suite sets
    assert not any(_is_set(key) for key in keys)
    with pytest.raises(ValueError, match="inside"):
        with config.patch(dict.fromkeys(keys, 7)):
            assert [_read(config, key) for key in keys] == [7, 7]
            raise ValueError("inside")
    assert [_read(config, key) for key in keys] == [None, None]
    assert not any(_is_set(key) for key in keys)


@pytest.mark.parametrize("key", ["not_an_inductor_option", "triton.not_an_option", "triton"])
def test_patch_refuses_unknown_keys_as_torch(key):
    for cfg in (torch_config, config):  # a known key beside the unknown one is not left set either
        with pytest.raises(AttributeError, match="does not exist"):
            with cfg.patch({"cpp.max_horizontal_fusion_size": 3, key: 1}):
                pass
    assert not _is_set("cpp.max_horizontal_fusion_size")


@pytest.mark.parametrize("args,kwargs", [(("max_autotune",), {}), ((["max_autotune"],), {}),
                                         (({"max_autotune": True},), {"freezing": True}),
                                         (("max_autotune", True), {"freezing": True}), ((None, True), {}),
                                         (({"max_autotune": True}, True), {}), (("max_autotune", None), {})])
def test_patch_refuses_torchs_malformed_calls(args, kwargs):
    messages = []
    for cfg in (torch_config, config):
        with pytest.raises(AssertionError) as info:
            cfg.patch(*args, **kwargs)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert not _is_set("max_autotune") and not _is_set("freezing")
