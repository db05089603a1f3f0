"""``torch.hub``: downloading checkpoints by URL into a cache, and loading models from a local hub repository.

``load_state_dict_from_url`` downloads once into ``<hub dir>/checkpoints`` (``$TORCH_HOME/hub``, default
``~/.cache/torch/hub``, shared with PyTorch: a checkpoint PyTorch downloaded is found here too), checks the SHA-256
prefix in the file name when asked, and loads it with `jitorch.load`. ``load(repo_or_dir, model, source="local")``
runs a directory's ``hubconf.py``; fetching a GitHub repository needs the network, which the download does through
``urllib`` like any URL.

>>> import os, tempfile, jitorch
>>> path = os.path.join(tempfile.mkdtemp(), "w.pt")
>>> jitorch.save({"w": jitorch.ones(2)}, path)
>>> load_state_dict_from_url("file://" + path, model_dir=tempfile.mkdtemp(), progress=False)["w"]
tensor([1., 1.])
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import urllib.parse
import urllib.request

__all__ = ["get_dir", "set_dir", "download_url_to_file", "load_state_dict_from_url", "load", "list", "help"]

_HUB_DIR = [None]
_HASH = re.compile(r"-([a-f0-9]*)\.")  # torchvision's file names end in -<sha256 prefix>.<ext>


def get_dir():
    """The hub directory: ``set_dir``'s, else ``$TORCH_HOME/hub``, else ``$XDG_CACHE_HOME/torch/hub``."""
    if _HUB_DIR[0] is not None:
        return _HUB_DIR[0]
    home = os.environ.get("TORCH_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "torch")
    return os.path.join(os.path.expanduser(home), "hub")


def set_dir(d):
    _HUB_DIR[0] = os.path.expanduser(os.fspath(d))


def download_url_to_file(url, dst, hash_prefix=None, progress=True):
    """Download ``url`` to ``dst`` through a temporary file in the same directory (renamed when complete, so an
    interrupted download never leaves a partial ``dst``); with ``hash_prefix``, the SHA-256 must start with it."""
    dst = os.path.expanduser(dst)
    folder = os.path.dirname(os.path.abspath(dst))
    os.makedirs(folder, exist_ok=True)
    digest = hashlib.sha256()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "jitorch.hub"})) as response:
        total = response.headers.get("Content-Length")
        bar = _progress(progress, int(total) if total else None)
        tmp = tempfile.NamedTemporaryFile(delete=False, dir=folder, prefix=".download-")
        try:
            with tmp:
                while True:
                    chunk = response.read(1 << 16)
                    if not chunk:
                        break
                    tmp.write(chunk)
                    digest.update(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
            if hash_prefix is not None and not digest.hexdigest().startswith(hash_prefix):
                raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got "{digest.hexdigest()}")')
            shutil.move(tmp.name, dst)
        finally:
            if bar is not None:
                bar.close()
            if os.path.exists(tmp.name):
                os.remove(tmp.name)


def _progress(enabled, total):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr)


def load_state_dict_from_url(url, model_dir=None, map_location=None, progress=True, check_hash=False, file_name=None,
                             weights_only=False):
    """The object saved at ``url`` (a state dict, usually), downloaded once into ``model_dir`` (default
    ``<hub dir>/checkpoints``) and loaded with `jitorch.load`."""
    from .serialization import load as _load

    model_dir = model_dir or os.path.join(get_dir(), "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    name = file_name or os.path.basename(urllib.parse.urlparse(url).path)
    cached = os.path.join(model_dir, name)
    if not os.path.exists(cached):
        print(f'Downloading: "{url}" to {cached}', file=sys.stderr)
        found = _HASH.search(name) if check_hash else None
        download_url_to_file(url, cached, found.group(1) if found else None, progress=progress)
    return _load(cached, map_location=map_location, weights_only=weights_only)


def _hubconf(repo_dir):
    path = os.path.join(repo_dir, "hubconf.py")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Cannot find hubconf.py in {repo_dir}")
    spec = importlib.util.spec_from_file_location("hubconf", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, repo_dir)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(repo_dir)
    return module


def _repo(repo_or_dir, source):
    if source not in ("github", "local"):
        raise ValueError(f'Unknown source: "{source}". Allowed values: "github" | "local".')
    if source == "local":
        return repo_or_dir
    raise RuntimeError(f"jitorch.hub: fetching the GitHub repository {repo_or_dir!r} is not supported; clone it and "
                       "call jitorch.hub.load(path, model, source='local')")


def _entry(module, model):
    fn = getattr(module, model, None)
    if fn is None or not callable(fn):
        raise RuntimeError(f"Cannot find callable {model} in hubconf")
    return fn


def load(repo_or_dir, model, *args, source="github", trust_repo=None, force_reload=False, verbose=True,
         skip_validation=False, **kwargs):
    """``model(*args, **kwargs)`` from the ``hubconf.py`` of a local repository directory (``source="local"``)."""
    return _entry(_hubconf(_repo(repo_or_dir, source)), model)(*args, **kwargs)


def list(github, force_reload=False, skip_validation=False, trust_repo=None, verbose=True):  # noqa: A001
    """The entry points a repository's ``hubconf.py`` defines (callables not starting with ``_``)."""
    module = _hubconf(_repo(github, "local" if os.path.isdir(github) else "github"))
    return [name for name in dir(module) if callable(getattr(module, name)) and not name.startswith("_")]


def help(github, model, force_reload=False, skip_validation=False, trust_repo=None):  # noqa: A001
    """The docstring of one entry point."""
    module = _hubconf(_repo(github, "local" if os.path.isdir(github) else "github"))
    return _entry(module, model).__doc__

