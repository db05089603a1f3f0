"""``torch.utils.model_zoo``: the old home of checkpoint downloads, kept as torch keeps it.

``load_url`` is `jitorch.hub.load_state_dict_from_url` itself (torch binds the same function under both names), so
it downloads once into ``model_dir`` (default ``<hub dir>/checkpoints``), reuses the cached file afterwards and loads
it with `jitorch.load`. As in torch, ``import jitorch`` does not import this module.

>>> import os, tempfile, jitorch
>>> import jitorch.utils.model_zoo as model_zoo
>>> path = os.path.join(tempfile.mkdtemp(), "net.pt")
>>> jitorch.save({"bias": jitorch.zeros(2)}, path)
>>> model_zoo.load_url("file://" + path, model_dir=tempfile.mkdtemp(), progress=False)["bias"]
tensor([0., 0.])
"""
from ..hub import load_state_dict_from_url as load_url

__all__ = ["load_url"]
