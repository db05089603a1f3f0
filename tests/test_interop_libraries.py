"""Libraries research code combines with torch, over jitorch tensors: safetensors' ``safe_open`` and
``safetensors.torch`` without PyTorch, matplotlib, tqdm over a DataLoader, ``np.asarray`` of tensors it cannot read."""
from __future__ import annotations

import io
import subprocess
import sys
import warnings

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch

import jitorch
from jitorch.safetensors import safe_open
from helpers import assert_same

SLICES = [(slice(None), 1), 1, (Ellipsis, 2), (slice(0, 1), slice(None), slice(1, 3)), (-1,), (slice(-2, None),), (),
          slice(0, 5)]


@pytest.fixture
def torch_file(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {"w": torch.randn(2, 3, 4, generator=gen), "empty": torch.zeros(0, 3), "ids": torch.arange(5),
               "half": torch.randn(4, generator=gen).to(torch.bfloat16), "mask": torch.tensor([True, False])}
    path = tmp_path / "t.safetensors"
    safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})
    return path


def test_safe_open_reads_as_safetensors_does(torch_file):
    with safetensors.safe_open(torch_file, framework="pt") as theirs, safe_open(torch_file, framework="pt") as ours:
        assert ours.keys() == theirs.keys() and ours.offset_keys() == theirs.offset_keys()
        assert ours.metadata() == theirs.metadata() == {"format": "pt"}
        for name in theirs.keys():
            assert_same(ours.get_tensor(name), theirs.get_tensor(name), what=name)
            mine, real = ours.get_slice(name), theirs.get_slice(name)
            assert (mine.get_shape(), mine.get_dtype()) == (real.get_shape(), real.get_dtype())
        w, w_real = ours.get_slice("w"), theirs.get_slice("w")
        for index in SLICES:
            assert_same(w[index], w_real[index], what=f"w[{index}]")
        assert_same(ours.get_slice("empty")[:, 1:], theirs.get_slice("empty")[:, 1:])
    with safe_open(torch_file, framework="numpy") as f:
        assert type(f.get_tensor("w")) is np.ndarray
    tensor = safe_open(torch_file, framework="pt").get_tensor("w")
    tensor.add_(1)  # its own writable memory, not a view of the file


def _errors(opener, torch_file):
    out = []
    for action in (lambda: opener(torch_file, framework="tf2"),
                   lambda: opener(torch_file, framework="pt").get_tensor("x"),
                   lambda: opener(torch_file, framework="pt").get_slice("w")[0, 0, 0, 0]):
        with pytest.raises(Exception) as err:
            action()
        out.append((type(err.value), str(err.value)))
    with opener(torch_file, framework="pt") as f:
        pass
    with pytest.raises(Exception) as err:
        f.get_tensor("w")
    out.append((type(err.value), str(err.value)))
    with pytest.raises(FileNotFoundError):  # the message is the OS's (safetensors drops the errno)
        opener(torch_file.with_name("missing"), framework="pt")
    return out


def test_safe_open_errors_match_safetensors(torch_file):
    ours, theirs = _errors(safe_open, torch_file), _errors(safetensors.safe_open, torch_file)
    for (our_type, our_msg), (their_type, their_msg) in zip(ours, theirs):
        assert our_type is their_type and our_msg == their_msg


def test_safetensors_torch_is_jitorchs_without_pytorch(tmp_path):
    path = tmp_path / "m.safetensors"
    code = ("import sys; sys.modules['torch'] = None\nimport jitorch as torch\n"
            "from safetensors.torch import load_file, save_file, save_model, safe_open\n"
            "m = torch.nn.Linear(3, 2)\n"
            f"save_file(m.state_dict(), {str(path)!r})\n"
            f"back = load_file({str(path)!r})\n"
            f"with safe_open({str(path)!r}, framework='pt') as f: bias = f.get_tensor('bias')\n"
            "print(sorted(back), torch.equal(back['weight'], m.weight), torch.equal(bias, m.bias))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['bias',", "'weight']", "True", "True"]
    # with PyTorch installed, the name is PyTorch's own module
    assert safetensors.torch.__file__.endswith("safetensors/torch.py")


# -- NumPy's view of a tensor: what matplotlib and tqdm read -----------------------------------------------------------
@pytest.mark.parametrize("lib", [jitorch, torch])
def test_np_asarray_of_a_meta_tensor_refuses_as_torch(lib):
    with pytest.raises(TypeError, match="can't convert meta device type tensor to numpy"):
        np.asarray(lib.ones(2, device="meta"))


def _drawn(lib):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    image = lib.linspace(0, 1, 60).reshape(3, 4, 5).permute(1, 2, 0)  # a CHW tensor shown as HWC
    fig, (a, b) = plt.subplots(1, 2)
    a.imshow(image)
    b.plot(lib.arange(4.0), lib.arange(4.0) ** 2)
    b.hist(lib.arange(10.0), bins=3)
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba()).copy()
    plt.close(fig)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        plt.imshow(lib.ones(2, 2, requires_grad=True))
    plt.close("all")
    return pixels


def test_matplotlib_draws_tensors_as_torchs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch's __array__ takes no copy keyword
        np.testing.assert_array_equal(_drawn(jitorch), _drawn(torch))


def _progress(lib):
    from tqdm import tqdm

    data = lib.utils.data.TensorDataset(lib.arange(10.0).reshape(5, 2), lib.arange(5))
    loader = lib.utils.data.DataLoader(data, batch_size=2)
    bar = tqdm(loader, file=io.StringIO(), mininterval=0)
    seen = []
    for x, y in bar:
        loss = x.sum()
        bar.set_postfix(loss=loss.item())
        bar.set_description(f"loss {loss:.2f}")
        seen.append((tuple(x.shape), y.tolist()))
    return bar.total, seen, bar.postfix, bar.desc


def test_tqdm_over_a_dataloader_as_torchs():
    assert _progress(jitorch) == _progress(torch)
