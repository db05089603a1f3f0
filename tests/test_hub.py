"""jitorch.hub: checkpoints downloaded once by URL (file:// here), hash prefixes checked, local hubconf entry points."""
import hashlib
import os

import numpy as np
import pytest

import jitorch
from jitorch import hub


@pytest.fixture
def hub_dir(tmp_path):
    saved = hub._HUB_DIR[0]
    hub.set_dir(tmp_path / "hub")
    yield tmp_path / "hub"
    hub._HUB_DIR[0] = saved


def _checkpoint(tmp_path, name="weights.pt"):
    path = tmp_path / name
    jitorch.save({"w": jitorch.arange(4.0), "b": jitorch.ones(2)}, str(path))
    return path


def test_downloads_once_into_the_hub_checkpoints(tmp_path, hub_dir):
    src = _checkpoint(tmp_path)
    state = hub.load_state_dict_from_url(src.as_uri(), progress=False)
    assert state["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    cached = hub_dir / "checkpoints" / "weights.pt"
    assert cached.exists() and hub.get_dir() == str(hub_dir)
    os.remove(src)  # the second call reads the cache, not the URL
    again = hub.load_state_dict_from_url(src.as_uri(), progress=False, map_location="cpu", weights_only=True)
    np.testing.assert_array_equal(again["b"].numpy(), [1.0, 1.0])


def test_hash_prefix_in_the_file_name_is_checked(tmp_path, hub_dir):
    src = _checkpoint(tmp_path)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    good = tmp_path / f"model-{digest[:8]}.pt"
    os.rename(src, good)
    assert "w" in hub.load_state_dict_from_url(good.as_uri(), check_hash=True, progress=False)
    bad = tmp_path / "other-deadbeef.pt"
    _checkpoint(tmp_path, bad.name)
    with pytest.raises(RuntimeError, match="invalid hash value"):
        hub.load_state_dict_from_url(bad.as_uri(), check_hash=True, progress=False)
    assert not (hub_dir / "checkpoints" / bad.name).exists()  # a failed download leaves no file behind


def test_download_url_to_file_and_local_hubconf(tmp_path):
    src = _checkpoint(tmp_path)
    dst = tmp_path / "out" / "copy.pt"
    hub.download_url_to_file(src.as_uri(), str(dst), progress=False)
    assert dst.read_bytes() == src.read_bytes()
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "hubconf.py").write_text(
        "import jitorch\n\ndef tiny(width=3):\n    '''A linear layer.'''\n    return jitorch.nn.Linear(width, 2)\n")
    model = hub.load(str(repo), "tiny", width=5, source="local")
    assert isinstance(model, jitorch.nn.Linear) and model.in_features == 5
    assert hub.list(str(repo)) == ["tiny"] and hub.help(str(repo), "tiny") == "A linear layer."
    with pytest.raises(RuntimeError, match="Cannot find callable"):
        hub.load(str(repo), "missing", source="local")
    with pytest.raises(ValueError, match="Unknown source"):
        hub.load(str(repo), "tiny", source="ftp")
