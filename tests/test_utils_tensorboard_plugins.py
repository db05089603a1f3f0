"""SummaryWriter's less common writers against torch's: add_tensor, add_mesh, add_image_with_boxes, add_video and
add_onnx_graph write the same events (moviepy and onnx, absent here, are stood in for by fakes where torch needs them).
"""
import sys
import types

import numpy as np
import pytest
import torch.utils.tensorboard as tt
from test_utils_tensorboard import WALL, accumulate, assert_same_events, pixels, write_both

import jitorch
import jitorch.utils.tensorboard as jt

rng = np.random.default_rng(0)
VALUES = rng.normal(size=(3, 4))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
                                   "uint8", "bool", "complex64", "complex128"])
def test_add_tensor_writes_torchs_tensor_proto(tmp_path, dtype):
    def calls(w, lib):
        def t(array):
            return lib.tensor(array * 5 + 1j * array if "complex" in dtype else array * 5).to(getattr(lib, dtype))

        w.add_tensor("x", t(VALUES), 0, walltime=WALL)
        w.add_tensor("x", t(VALUES).t(), 1, walltime=WALL)  # non-contiguous
        w.add_tensor("x", t(VALUES)[1, 2], 2, walltime=WALL)  # 0-d
        w.add_tensor("x", t(VALUES)[:0], 3, walltime=WALL)  # empty
    a, _ = assert_same_events(tmp_path, calls)
    protos = [e.tensor_proto for e in accumulate(a).Tensors("x")]
    assert [[d.size for d in p.tensor_shape.dim] for p in protos] == [[3, 4], [4, 3], [], [0, 4]]


def test_add_tensor_keeps_grad_tensors_and_refuses_as_torch(tmp_path):
    assert_same_events(tmp_path, lambda w, lib: w.add_tensor("g", lib.ones(2, requires_grad=True) * 2, walltime=WALL))
    w = jt.SummaryWriter(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="x has unsupported tensor dtype jitorch.uint16"):
        w.add_tensor("x", jitorch.ones(2, dtype=jitorch.uint16))
    with pytest.raises(AttributeError, match="add_tensor: 'list' object has no attribute 'numel'"):
        w.add_tensor("x", [1, 2])  # torch's writer fails on `.numel()` too
    w.close()


def test_add_mesh_writes_torchs_mesh_plugin_data(tmp_path):
    vertices = rng.normal(size=(2, 4, 3)).astype(np.float32)
    colors = rng.integers(0, 256, size=(2, 4, 3)).astype(np.uint8)
    faces = np.array([[[0, 2, 3], [0, 3, 1], [0, 1, 2], [1, 3, 2]]] * 2, dtype=np.int32)
    config = {"camera": {"cls": "PerspectiveCamera", "fov": 75}, "lights": [{"cls": "AmbientLight"}]}

    def calls(w, lib):
        w.add_mesh("m", lib.tensor(vertices), colors=lib.tensor(colors), faces=lib.tensor(faces), config_dict=config,
                   global_step=0, walltime=WALL)
        w.add_mesh("points", lib.tensor(vertices).requires_grad_() * 2, global_step=1, walltime=WALL)
        w.add_mesh("np", vertices, faces=faces, walltime=WALL)  # arrays, as torch.as_tensor takes them
    a, _ = assert_same_events(tmp_path, calls)
    acc = accumulate(a)
    assert sorted(acc.Tags()["tensors"]) == ["m_COLOR", "m_FACE", "m_VERTEX", "np_FACE", "np_VERTEX", "points_VERTEX"]
    got = acc.Tensors("m_FACE")[0].tensor_proto
    np.testing.assert_array_equal(np.array(got.float_val).reshape(2, 4, 3), faces)
    with pytest.raises(ValueError, match="BxNx3"):
        jt.SummaryWriter(str(tmp_path / "bad")).add_mesh("m", jitorch.ones(4, 3))


def test_add_image_with_boxes_draws_torchs_boxes(tmp_path):
    image = rng.uniform(size=(3, 12, 16)).astype(np.float32)
    raw = (rng.uniform(size=(12, 16, 3)) * 255).astype(np.uint8)
    boxes = np.array([[1, 1, 8, 6], [4, 3, 15, 11]], dtype=np.float32)

    def calls(w, lib):
        w.add_image_with_boxes("b", lib.tensor(image), lib.tensor(boxes), 0, walltime=WALL)
        w.add_image_with_boxes("b", lib.tensor(image), lib.tensor(boxes), 1, walltime=WALL, labels=["cat", "dog"])
        w.add_image_with_boxes("b", lib.tensor(image), lib.tensor(boxes[:1]), 2, walltime=WALL, labels="cat")
        w.add_image_with_boxes("b", lib.tensor(image), lib.tensor(boxes), 3, walltime=WALL, labels=["one"])  # ignored
        w.add_image_with_boxes("u8", lib.tensor(raw), lib.tensor(boxes), 0, walltime=WALL, dataformats="HWC",
                               rescale=2)
        w.add_image_with_boxes("empty", lib.zeros(3, 12, 16), lib.zeros(0, 4), 0, walltime=WALL)
    a, b = assert_same_events(tmp_path, calls)
    images = accumulate(a).Images("b")
    plain, labelled, _, ignored = (pixels(i.encoded_image_string) for i in images)
    assert plain[1, 1].tolist() == plain[6, 8].tolist() == [255, 0, 0]  # the first box's corners, in red
    np.testing.assert_array_equal(plain, ignored)  # one label for two boxes: no labels at all
    assert (labelled != plain).any()
    assert images[0].width == 16 and images[0].height == 12


def fake_moviepy():
    """A stand-in for moviepy.editor whose 'GIF' is the frames' bytes and the frame rate."""
    class ImageSequenceClip:
        def __init__(self, frames, fps):
            self.frames, self.fps = frames, fps

        def write_gif(self, filename, verbose=True, logger="bar"):
            with open(filename, "wb") as f:
                f.write(np.stack(self.frames).tobytes() + str(self.fps).encode())

    package, editor = types.ModuleType("moviepy"), types.ModuleType("moviepy.editor")
    editor.ImageSequenceClip, package.editor = ImageSequenceClip, editor
    return package, editor


def test_add_video_without_moviepy_prints_and_writes_torchs_empty_value(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "moviepy", None)
    video = rng.uniform(size=(1, 2, 3, 4, 4)).astype(np.float32)
    a, _ = assert_same_events(tmp_path, lambda w, lib: w.add_video("v", lib.tensor(video), 0, walltime=WALL))
    assert capsys.readouterr().out == "add_video needs package moviepy\n" * 2
    with pytest.raises(ValueError, match="not enough values to unpack"):  # the layout is checked first, as torch's
        jt.SummaryWriter(str(tmp_path / "bad")).add_video("v", jitorch.ones(2, 3, 4, 4))


def test_add_video_with_moviepy_encodes_torchs_frames(tmp_path, monkeypatch):
    package, editor = fake_moviepy()
    monkeypatch.setitem(sys.modules, "moviepy", package)
    monkeypatch.setitem(sys.modules, "moviepy.editor", editor)
    video = rng.uniform(size=(3, 2, 3, 4, 5)).astype(np.float32)  # 3 videos: tiled in a row with a black 4th
    raw = (rng.uniform(size=(2, 5, 1, 3, 3)) * 255).astype(np.uint8)

    def calls(w, lib):
        w.add_video("v", lib.tensor(video), 0, fps=7, walltime=WALL)
        w.add_video("u8", lib.tensor(raw), 0, walltime=WALL)
    a, _ = assert_same_events(tmp_path, calls)
    acc = accumulate(a)
    v = acc.Images("v")[0]
    assert (v.height, v.width) == (4, 20) and v.encoded_image_string.endswith(b"7")
    frames = np.frombuffer(v.encoded_image_string[:-1], dtype=np.uint8).reshape(2, 4, 20, 3)
    np.testing.assert_array_equal(frames[:, :, 15:], 0)  # the padding video
    for i in range(3):
        expected = (video[i].transpose(0, 2, 3, 1) * 255).clip(0, 255).astype(np.uint8)
        np.testing.assert_array_equal(frames[:, :, 5 * i:5 * i + 5], expected)
    assert (acc.Images("u8")[0].height, acc.Images("u8")[0].width) == (3, 6)  # 2 videos side by side


def fake_onnx():
    """A stand-in for the onnx package: ``load`` returns a two-operator model graph."""
    ns = types.SimpleNamespace

    def value(name, elem_type, dims):
        shape = ns(dim=[ns(dim_value=d) for d in dims])
        return ns(name=name, type=ns(tensor_type=ns(elem_type=elem_type, shape=shape)))

    def attribute(name, v):
        return ns(ListFields=lambda: [("name", name), ("i", v)])

    graph = ns(input=[value("x", 1, [2, 3])], output=[value("y", 1, [2, 4])],
               node=[ns(op_type="Gemm", input=["x", "w"], output=["h"], attribute=[attribute("transB", 1)]),
                     ns(op_type="Relu", input=["h"], output=["y"], attribute=[])])
    module = types.ModuleType("onnx")
    module.load = lambda fname: ns(graph=graph)
    return module


def test_add_onnx_graph_as_torchs(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # not installed: both fail importing it
    for mod in (tt, jt):
        with pytest.raises(ImportError, match="onnx"):
            mod.SummaryWriter(str(tmp_path / "none")).add_onnx_graph("model.onnx")
    monkeypatch.setitem(sys.modules, "onnx", fake_onnx())
    a, b = write_both(tmp_path, lambda w, lib: w.add_onnx_graph("model.onnx"))
    graphs = []
    for log_dir in (a, b):
        graph = accumulate(log_dir).Graph()
        graphs.append(graph.SerializeToString(deterministic=True))
    assert graphs[0] == graphs[1]
    graph = accumulate(a).Graph()
    assert [(n.name, n.op, list(n.input)) for n in graph.node] == [
        ("x", "Variable", []), ("y", "Variable", []), ("h", "Gemm", ["x", "w"]), ("y", "Relu", ["h"])]
    assert graph.node[2].attr["parameters"].s == b"transB = 1"


@pytest.mark.parametrize("name", ["add_tensor", "add_mesh", "add_image_with_boxes", "add_video", "add_onnx_graph"])
def test_signatures_are_torchs(name):
    import inspect

    def params(method):
        return [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]

    assert params(getattr(jt.SummaryWriter, name)) == params(getattr(tt.SummaryWriter, name))
