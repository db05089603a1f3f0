"""Public functions pickle by reference, as torch's do: a whole saved model holding one (``F.relu`` in a
``TransformerEncoderLayer``) loads back, and each public function of every loaded public module round-trips."""
from __future__ import annotations

import io
import pickle
import sys
import types

import numpy as np
import pytest
import torch

import jitorch


def _public_functions():
    names = sorted(n for n in sys.modules if n.split(".")[0] == "jitorch" and not any(
        part.startswith("_") for part in n.split(".")))
    for module_name in names:
        for name, fn in sorted(vars(sys.modules[module_name]).items()):
            if not name.startswith("_") and isinstance(fn, types.FunctionType) and \
                    fn.__module__.startswith("jitorch"):
                yield f"{module_name}.{name}", fn


def test_every_public_function_pickles_by_reference():
    import jitorch.nn.init  # noqa: F401 - its deprecated spellings are made by a factory
    found = dict(_public_functions())
    assert {"jitorch.nn.functional.relu", "jitorch.tanh", "jitorch.arange", "jitorch.nn.init.constant"} <= set(found)
    broken = []
    for path, fn in found.items():
        try:
            if pickle.loads(pickle.dumps(fn)) is not fn:
                broken.append(f"{path}: loads a different object")
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            broken.append(f"{path}: {exc}")
    assert not broken, "\n".join(broken[:20])


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_saved_transformer_layer_loads_and_matches_torch(activation):
    jitorch.manual_seed(0)
    layer = jitorch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, activation=activation,
                                               batch_first=True).eval()
    ref = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, activation=activation,
                                           batch_first=True).eval()
    ref.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy()) for k, v in layer.state_dict().items()})
    buf = io.BytesIO()
    jitorch.save(layer, buf)
    buf.seek(0)
    loaded = jitorch.load(buf, weights_only=False)
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    with jitorch.no_grad():
        got = loaded(jitorch.tensor(x)).numpy()
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert loaded.activation is layer.activation


def test_function_names_lead_to_the_public_spelling():
    assert (jitorch.nn.functional.relu.__module__, jitorch.nn.functional.relu.__qualname__) == \
        ("jitorch.nn.functional", "relu")
    assert (jitorch.tanh.__module__, jitorch.tanh.__qualname__) == ("jitorch", "tanh")
