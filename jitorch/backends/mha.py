"""``jitorch.backends.mha``: whether ``TransformerEncoder`` takes PyTorch's nested-tensor inference path, whose one
visible effect is kept: zeros at padded positions of the output (see ``nn.modules.transformer``).

>>> import jitorch.backends
>>> jitorch.backends.mha.get_fastpath_enabled()
True
"""
_state = {"enabled": True}


def get_fastpath_enabled() -> bool:
    return _state["enabled"]


def set_fastpath_enabled(value: bool) -> None:
    _state["enabled"] = bool(value)
