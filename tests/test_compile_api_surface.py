"""torch.compile's and torch.compiler's surface that training scripts use: backends and options, ``disable``,
``set_stance``, ``torch._dynamo.config`` and checkpoints saved from torch.compile'd models."""
import collections

import numpy as np
import pytest
import torch

import jitorch
from jitorch import nn


@pytest.mark.parametrize("backend", ["aot_eager", "inductor", "eager"])
def test_torch_backend_names_compute_eagers_results(backend):
    lin = nn.Linear(4, 2)
    x = jitorch.randn(3, 4)
    out = jitorch.compile(lin, backend=backend)(x)
    np.testing.assert_allclose(out.detach().numpy(), lin(x).detach().numpy(), rtol=1e-6)


def test_inductor_options_are_accepted_and_unknown_ones_refused():
    f = jitorch.compile(lambda x: x * 2, options={"shape_padding": True, "triton.cudagraphs": False})
    assert f(jitorch.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="unexpected optimization option"):
        jitorch.compile(lambda x: x, options={"no_such_option": 1})


def test_a_disabled_helper_runs_the_compiled_function_eagerly():
    calls = []

    @jitorch.compiler.disable
    def log(x):
        calls.append(float(x.sum()))  # a value read that eager code may do freely
        return x

    f = jitorch.compile(lambda x: log(x * 2) + 1)
    for v in (1.0, 2.0, 3.0):
        assert f(jitorch.full((2,), v)).tolist() == [2 * v + 1] * 2
    assert calls == [4.0, 8.0, 12.0]
    assert "torch.compiler.disable" in f.entries[0].break_reason
    with pytest.raises(RuntimeError, match="torch.compiler.disable"):
        jitorch.compile(lambda x: log(x), fullgraph=True)(jitorch.ones(2))


def test_set_stance():
    f = jitorch.compile(lambda x: x.exp())
    with jitorch.compiler.set_stance("force_eager"):
        f(jitorch.ones(3))
    assert f.entries == []
    f(jitorch.ones(3))
    assert len(f.entries) == 1
    with jitorch.compiler.set_stance("fail_on_recompile"):
        f(jitorch.ones(3))
        with pytest.raises(RuntimeError, match="would recompile.*arg0.shape"):
            f(jitorch.ones(4))
    with jitorch.compiler.set_stance("eager_on_recompile"):
        assert f(jitorch.zeros(5)).tolist() == [1.0] * 5
    assert len(f.entries) == 1 and jitorch.compiler.config.stance == "default"
    with pytest.raises(ValueError, match="unknown stance"):
        jitorch.compiler.set_stance("sometimes")


def test_dynamo_config_limits_are_the_recompile_limit(monkeypatch):
    monkeypatch.setattr(jitorch.compiler.config, "recompile_limit", 8)
    jitorch._dynamo.config.cache_size_limit = 2
    assert jitorch.compiler.config.recompile_limit == 2 == jitorch._dynamo.config.recompile_limit
    jitorch._dynamo.config.suppress_errors = True  # accepted
    jitorch._dynamo.mark_dynamic(jitorch.ones(3, 4), 0)
    jitorch._dynamo.reset()


def test_a_checkpoint_of_a_torch_compiled_model_loads_into_a_jitorch_compiled_one():
    # What torch.compile(model).state_dict() holds: the original module is the submodule ``_orig_mod`` (built by hand
    # here: calling torch.compile would change torch's process-wide settings for later tests).
    tm = torch.nn.Linear(3, 2)
    saved = collections.OrderedDict(("_orig_mod." + k, v) for k, v in tm.state_dict().items())
    model = nn.Linear(3, 2)
    compiled = jitorch.compile(model)
    compiled.load_state_dict(collections.OrderedDict((k, jitorch.tensor(v.detach().numpy())) for k, v in saved.items()))
    np.testing.assert_array_equal(model.weight.detach().numpy(), tm.weight.detach().numpy())
