"""torch.utils.weak: identity-keyed weak mappings over tensors, side by side with torch's."""
import gc

import pytest
import torch

import jitorch


@pytest.mark.parametrize("lib", [torch, jitorch], ids=["torch", "jitorch"])
def test_weak_tensor_key_dictionary_keys_by_identity_and_forgets_dead_keys(lib):
    from importlib import import_module
    weak = import_module(f"{lib.__name__}.utils.weak")
    table = weak.WeakTensorKeyDictionary()
    a, b = lib.ones(2), lib.ones(2)          # equal values, different objects
    table[a] = "a"
    table[b] = "b"
    table[a] = "a2"
    assert len(table) == 2 and table[a] == "a2" and table[b] == "b"
    assert a in table and lib.ones(2) not in table
    assert set(map(id, table)) == {id(a), id(b)}
    assert table.get(lib.zeros(1), "missing") == "missing"
    del table[b]
    assert len(table) == 1
    copy = table.copy()
    del a
    gc.collect()
    assert len(table) == 0 and len(copy) == 0
    t = lib.zeros(1)
    ref = weak.TensorWeakRef(t)
    assert ref() is t
    del t
    gc.collect()
    assert ref() is None


def test_weak_id_ref_equality_is_identity():
    from jitorch.utils.weak import WeakIdRef
    a, b = jitorch.ones(1), jitorch.ones(1)
    assert WeakIdRef(a) == WeakIdRef(a) and WeakIdRef(a) != WeakIdRef(b)
    assert hash(WeakIdRef(a)) == id(a)
    with pytest.raises(TypeError, match="TensorWeakRef: expected a Tensor, got int"):
        jitorch.utils.weak.TensorWeakRef(3)
