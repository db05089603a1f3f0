"""``FlatWeights``: the recurrent modules' weight list as PyTorch keeps it (``RNNBase._flat_weights``).

Set at construction, kept current by attribute assignment (AWD-LSTM's WeightDrop assigns a plain tensor before each
forward), re-read after a move or cast, and refreshed at the start of each forward when a weight attribute no longer
is the listed tensor (a parametrization, ``functional_call``), through PyTorch's very reads (``hasattr`` then
``getattr``, stopping at the first changed weight): a stateful parametrization such as spectral_norm's power
iteration advances once per read, so the same reads give the same weights.

>>> import jitorch
>>> lstm = jitorch.nn.LSTM(2, 3)
>>> [tuple(w.shape) for w in lstm._flat_weights]
[(12, 2), (12, 3), (12,), (12,)]
>>> lstm._flat_weights[0] is lstm.weight_ih_l0
True
"""
from __future__ import annotations

__all__ = ["FlatWeights"]


class FlatWeights:
    """Mixin of ``RNNBase`` (before ``Module``): ``_flat_weights`` over ``_flat_weights_names``; forwards call
    ``_update_flat_weights`` first."""

    def _init_flat_weights(self):
        self.__dict__["_flat_weights"] = [getattr(self, name) if hasattr(self, name) else None
                                          for name in self._flat_weights_names]

    def _update_flat_weights(self):
        listed = self.__dict__.get("_flat_weights")
        if listed is None:
            return self._init_flat_weights()
        for name, seen in zip(self._flat_weights_names, listed):
            weight = getattr(self, name) if hasattr(self, name) else None
            if weight is not None and seen is not None and seen is not weight:
                return self._init_flat_weights()

    def __setattr__(self, name, value):
        listed = self.__dict__.get("_flat_weights")
        if listed is not None and name in self._flat_weights_names:
            listed[self._flat_weights_names.index(name)] = value
        super().__setattr__(name, value)

    def __setstate__(self, state):
        super().__setstate__(state)
        if "_flat_weights" not in self.__dict__ and "_flat_weights_names" in self.__dict__:
            self._init_flat_weights()

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self._init_flat_weights()  # (as PyTorch: re-read after a move or cast)
        return out
