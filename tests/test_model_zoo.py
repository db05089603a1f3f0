"""``jitorch.utils.model_zoo.load_url`` against ``torch.utils.model_zoo.load_url`` on ``file://`` URLs (no network)."""
from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.utils.model_zoo as torch_zoo
from helpers import assert_same

import jitorch
import jitorch.utils.model_zoo as model_zoo


@pytest.fixture
def checkpoint(tmp_path):
    """A torch-saved state dict (float weights, an int buffer, a non-contiguous view) and its ``file://`` URL."""
    g = torch.Generator().manual_seed(0)
    state = {"fc.weight": torch.randn(4, 3, generator=g), "fc.bias": torch.randn(4, generator=g).double(),
             "steps": torch.tensor(7), "t": torch.randn(3, 5, generator=g).t()}
    path = tmp_path / "src" / "net.pth"
    path.parent.mkdir()
    torch.save(state, path)
    return path, pathlib.Path(path).as_uri()


def _same_state(jt_state, th_state):
    assert list(jt_state) == list(th_state)
    for key in th_state:
        assert_same(jt_state[key], th_state[key], what=key)


def test_load_url_is_hubs_function_as_in_torch():
    assert torch_zoo.load_url is torch.hub.load_state_dict_from_url
    assert model_zoo.load_url is jitorch.hub.load_state_dict_from_url


def test_loads_a_torch_checkpoint_like_torch(checkpoint, tmp_path):
    _, url = checkpoint
    th = torch_zoo.load_url(url, model_dir=str(tmp_path / "th"), progress=False)
    jt = model_zoo.load_url(url, model_dir=str(tmp_path / "jt"), progress=False)
    _same_state(jt, th)
    assert all(isinstance(v, jitorch.Tensor) for v in jt.values())
    # the download is a byte copy of the source, under the URL's file name
    for d in ("th", "jt"):
        assert (tmp_path / d / "net.pth").read_bytes() == checkpoint[0].read_bytes()


@pytest.mark.parametrize("map_location", ["cpu", {"cpu": "cpu"}, "callable"])
def test_map_location_reaches_load(checkpoint, tmp_path, map_location):
    _, url = checkpoint
    seen = {"th": [], "jt": []}

    def recorder(lib):
        def remap(storage, location):
            seen[lib].append(location)
            return storage
        return remap

    th = torch_zoo.load_url(url, model_dir=str(tmp_path / "th"), progress=False,
                            map_location=recorder("th") if map_location == "callable" else map_location)
    jt = model_zoo.load_url(url, model_dir=str(tmp_path / "jt"), progress=False,
                            map_location=recorder("jt") if map_location == "callable" else map_location)
    _same_state(jt, th)
    assert all(v.device.type == "cpu" for v in jt.values())
    assert seen["jt"] == seen["th"]
    assert len(seen["th"]) == (4 if map_location == "callable" else 0)


def test_model_dir_caches_the_first_download(checkpoint, tmp_path, capfd):
    path, url = checkpoint
    cache = tmp_path / "cache"
    first = model_zoo.load_url(url, model_dir=str(cache), progress=False)
    announced = "".join(capfd.readouterr())
    assert f'Downloading: "{url}" to {cache / "net.pth"}' in announced
    # a second call reads the cached copy: the source may change or vanish without being noticed
    torch.save({"other": torch.zeros(1)}, path)
    again = model_zoo.load_url(url, model_dir=str(cache), progress=False)
    assert "Downloading" not in "".join(capfd.readouterr())
    assert list(again) == list(first)
    os.remove(path)
    np.testing.assert_array_equal(model_zoo.load_url(url, model_dir=str(cache), progress=False)["fc.weight"].numpy(),
                                  first["fc.weight"].numpy())
    assert sorted(p.name for p in cache.iterdir()) == ["net.pth"]  # no temporary download left behind


def test_file_name_picks_the_cached_name(checkpoint, tmp_path):
    _, url = checkpoint
    cache = tmp_path / "cache"
    state = model_zoo.load_url(url, model_dir=str(cache), progress=False, file_name="renamed.pt")
    assert sorted(p.name for p in cache.iterdir()) == ["renamed.pt"]
    _same_state(state, torch.load(cache / "renamed.pt"))


def test_default_model_dir_is_hub_dir_checkpoints(checkpoint, tmp_path, monkeypatch):
    # as torch: $TORCH_HOME/hub/checkpoints when set_dir was not called
    _, url = checkpoint
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(jitorch.hub, "_HUB_DIR", [None])
    model_zoo.load_url(url, progress=False)
    torch_dir = pathlib.Path(torch.hub.get_dir())
    assert torch_dir == tmp_path / "home" / "hub"
    assert (torch_dir / "checkpoints" / "net.pth").exists()


def test_check_hash_accepts_the_right_prefix_and_refuses_a_wrong_one(checkpoint, tmp_path):
    path, _ = checkpoint
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    good = path.with_name(f"net-{digest[:10]}.pth")
    bad = path.with_name("net-deadbeef.pth")
    for p in (good, bad):
        p.write_bytes(path.read_bytes())
    state = model_zoo.load_url(good.as_uri(), model_dir=str(tmp_path / "ok"), progress=False, check_hash=True)
    _same_state(state, torch.load(path))
    errors = []
    for lib, load in (("th", torch_zoo.load_url), ("jt", model_zoo.load_url)):
        with pytest.raises(RuntimeError, match="invalid hash value") as info:
            load(bad.as_uri(), model_dir=str(tmp_path / lib), progress=False, check_hash=True)
        errors.append(str(info.value))
        assert list((tmp_path / lib).iterdir()) == []  # the partial download is removed
    assert errors[1] == errors[0]
    # without check_hash, the misleading name is not checked (torch's default)
    _same_state(model_zoo.load_url(bad.as_uri(), model_dir=str(tmp_path / "jt"), progress=False), torch.load(path))


def test_model_zoo_is_not_imported_by_import_jitorch_as_in_torch():
    code = "import sys, {m}; print('{m}.utils.model_zoo' in sys.modules)"
    outs = [subprocess.run([sys.executable, "-c", code.format(m=m)], capture_output=True, text=True, check=True).stdout
            for m in ("torch", "jitorch")]
    assert outs[0] == outs[1] == "False\n"


@pytest.mark.cuda
def test_map_location_cuda_moves_the_state(checkpoint, tmp_path):
    _, url = checkpoint
    state = model_zoo.load_url(url, model_dir=str(tmp_path), progress=False, map_location="cuda")
    assert all(v.device.type == "cuda" for v in state.values())
    np.testing.assert_array_equal(state["t"].cpu().numpy(), torch.load(checkpoint[0])["t"].numpy())
