"""jitorch.utils.tensorboard against torch.utils.tensorboard: the same calls, with jitorch tensors on one side and
torch tensors on the other, write the same events (read back with TensorBoard's own readers)."""
import io
import os
import sys

import numpy as np
import pytest
import torch
import torch.utils.tensorboard as tt
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

import jitorch
import jitorch.utils.tensorboard as jt

WALL = 1_700_000_000.25


def write_both(tmp_path, calls, **kwargs):
    """Run ``calls(writer, lib)`` with each library's writer into its own directory; return the two directories."""
    dirs = []
    for name, lib, mod in (("jt", jitorch, jt), ("pt", torch, tt)):
        log_dir = str(tmp_path / name)
        with mod.SummaryWriter(log_dir, **kwargs) as w:
            calls(w, lib)
        dirs.append(log_dir)
    return dirs


def events(log_dir):
    """{sub-run: [Event without its wall time, as bytes]} of every event file under ``log_dir``."""
    out = {}
    for root, _, files in os.walk(log_dir):
        for f in sorted(files):
            if "tfevents" in f:
                evs = []
                for i, e in enumerate(EventFileLoader(os.path.join(root, f)).Load()):
                    if i == 0 and e.WhichOneof("what") == "file_version":
                        continue  # the file header: its wall time is the file's creation time
                    if e.wall_time != WALL:  # the writer's clock (add_custom_scalars takes no walltime)
                        e.ClearField("wall_time")
                    evs.append(e.SerializeToString(deterministic=True))
                out.setdefault(os.path.relpath(root, log_dir), []).extend(evs)
    return out


def assert_same_events(tmp_path, calls, **kwargs):
    a, b = write_both(tmp_path, calls, **kwargs)
    ea, eb = events(a), events(b)
    assert ea.keys() == eb.keys()
    for run in ea:
        assert ea[run] == eb[run], run
    assert sum(len(v) for v in ea.values()) > 0
    return a, b


def runs(log_dir):
    return sorted(f for f in os.listdir(log_dir) if "tfevents" not in f)


def accumulate(log_dir):
    acc = EventAccumulator(log_dir, size_guidance={"images": 0, "histograms": 0, "scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_scalars_of_every_kind_are_torchs(tmp_path):
    def calls(w, lib):
        w.add_scalar("loss", 0.5, 0, walltime=WALL)
        w.add_scalar("loss", lib.tensor(0.25), 1, walltime=WALL)  # 0-d tensor
        w.add_scalar("loss", lib.tensor([0.125], requires_grad=True) * 2, lib.tensor(2), walltime=WALL)
        w.add_scalar("acc/top1", np.float32(0.75), global_step=np.int64(3), walltime=WALL)
        w.add_scalar("new", lib.tensor(1.0 / 3), 4, walltime=WALL, new_style=True)
        w.add_scalar("new64", 1.0 / 3, 5, walltime=WALL, new_style=True, double_precision=True)
        w.add_scalars("run/a", {"x": 1.0, "y": lib.tensor(2.0)}, 0, walltime=WALL)
        w.add_scalars("run/a", {"x": 3.0}, 1, walltime=WALL)
    a, b = assert_same_events(tmp_path, calls)
    ja, pa = accumulate(a), accumulate(b)
    assert ja.Tags()["scalars"] == pa.Tags()["scalars"] == ["loss", "acc/top1"]
    got = [(e.step, e.value, e.wall_time) for e in ja.Scalars("loss")]
    assert got == [(e.step, e.value, e.wall_time) for e in pa.Scalars("loss")]
    assert got == [(0, 0.5, WALL), (1, 0.25, WALL), (2, 0.25, WALL)]
    assert runs(a) == runs(b) == ["run_a_x", "run_a_y"]
    sub = accumulate(os.path.join(a, "run_a_x")).Scalars("run/a")
    assert [(e.step, e.value) for e in sub] == [(0, 1.0), (1, 3.0)]
    with pytest.raises(AssertionError, match="one element"):
        jt.SummaryWriter(str(tmp_path / "bad")).add_scalar("v", jitorch.ones(2))


def test_histograms_have_torchs_buckets(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(40, 25)).astype(np.float32)

    def calls(w, lib):
        values = lib.tensor(data)
        w.add_histogram("w", values, 0, walltime=WALL)  # TensorFlow's default buckets
        w.add_histogram("w", values.requires_grad_() * 3, 1, walltime=WALL)
        w.add_histogram("w10", values, 0, bins=10, walltime=WALL)
        w.add_histogram("auto", values[::2, ::3], 0, bins="auto", max_bins=7, walltime=WALL)
        w.add_histogram("const", lib.ones(5, dtype=lib.float64), 0, bins="fd", walltime=WALL)
        w.add_histogram_raw("raw", 0, 2, 3, 3, 5, [1.0, 2.0], [1, 2], 0, walltime=WALL)
    a, b = assert_same_events(tmp_path, calls)
    ja, pa = accumulate(a), accumulate(b)
    for tag in ("w", "w10", "auto"):
        mine, theirs = ja.Histograms(tag), pa.Histograms(tag)
        assert [h.step for h in mine] == [h.step for h in theirs]
        for m, t in zip(mine, theirs):
            assert m.histogram_value == t.histogram_value
    counts, limits = np.histogram(data, bins=10)
    h = ja.Histograms("w10")[0].histogram_value  # an empty bucket ending at the first edge, then NumPy's
    assert h.bucket_limit == pytest.approx(limits.tolist()) and h.bucket == [0] + counts.tolist()
    assert len(ja.Histograms("auto")[0].histogram_value.bucket) <= 8  # 7 buckets and the empty one before


def pixels(encoded):
    return np.asarray(Image.open(io.BytesIO(encoded)))


@pytest.mark.parametrize("shape,fmt,method", [
    ((3, 5, 7), "CHW", "add_image"), ((5, 7, 3), "HWC", "add_image"), ((5, 7), "HW", "add_image"),
    ((1, 5, 7), "CHW", "add_image"), ((7, 5, 3), "WHC", "add_image"),
    ((3, 3, 4, 6), "NCHW", "add_images"), ((10, 4, 6, 1), "NHWC", "add_images")])
def test_images_decode_to_torchs_pixels(tmp_path, shape, fmt, method):
    rng = np.random.default_rng(1)
    data = rng.uniform(-0.2, 1.2, size=shape).astype(np.float32)  # outside [0, 1]: clipped as torch clips
    raw = (rng.uniform(size=shape) * 255).astype(np.uint8)

    def calls(w, lib):
        getattr(w, method)("img", lib.tensor(data), 0, walltime=WALL, dataformats=fmt)
        getattr(w, method)("img", lib.tensor(data).requires_grad_(), 1, walltime=WALL, dataformats=fmt)
        getattr(w, method)("u8", lib.tensor(raw), 0, walltime=WALL, dataformats=fmt)
    a, b = assert_same_events(tmp_path, calls)
    ja, pa = accumulate(a), accumulate(b)
    for tag in ("img", "u8"):
        for m, t in zip(ja.Images(tag), pa.Images(tag), strict=True):
            assert (m.step, m.width, m.height) == (t.step, t.width, t.height)
            np.testing.assert_array_equal(pixels(m.encoded_image_string), pixels(t.encoded_image_string))
    first = pixels(ja.Images("u8")[0].encoded_image_string)
    if fmt == "HWC":
        np.testing.assert_array_equal(first, raw)
    assert first.shape[2] == 3 and first.dtype == np.uint8


def test_figures_text_audio_pr_curves_and_custom_scalars(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def figure():
        fig = plt.figure(figsize=(2, 1.5), dpi=40)
        plt.plot([0, 1, 2], [1, 0, 2])
        return fig

    labels = np.array([0, 1, 1, 0, 1, 0, 1, 1])
    preds = np.linspace(0.05, 0.95, 8)

    def calls(w, lib):
        fig = figure()
        w.add_figure("fig", fig, 0, walltime=WALL)
        assert not plt.fignum_exists(fig.number)  # close=True closes it
        w.add_figure("figs", [figure(), figure()], 1, walltime=WALL)
        w.add_text("note", "**lr** = 0.1 ünïcode", 0, walltime=WALL)
        w.add_audio("snd", lib.tensor(np.sin(np.linspace(0, 20, 400))), 0, sample_rate=8000, walltime=WALL)
        w.add_pr_curve("pr", lib.tensor(labels), lib.tensor(preds), 0, num_thresholds=20, walltime=WALL)
        tp = lib.tensor([4.0, 2.0])
        w.add_pr_curve_raw("prr", tp, tp, tp, tp, tp / 8, tp / 4, 0, num_thresholds=2, walltime=WALL)
        w.add_custom_scalars({"c": {"loss": ["Multiline", ["loss/a", "loss/b"]], "m": ["Margin", ["a", "b", "c"]]}})
        w.add_custom_scalars_multilinechart(["x", "y"], category="k", title="t")
    a, _ = assert_same_events(tmp_path, calls)
    acc = accumulate(a)
    assert acc.Images("fig")[0].width == 80 and acc.Images("figs")[0].width == 160
    text = acc.Tensors("note/text_summary")[0].tensor_proto.string_val[0].decode()
    assert text == "**lr** = 0.1 ünïcode"


def test_hparams_write_torchs_plugin_data(tmp_path):
    def calls(w, lib):
        w.add_hparams({"lr": 0.1, "bs": 32, "opt": "adam", "nesterov": True, "gamma": lib.tensor([0.9]),
                       "unused": None}, {"hparam/acc": 0.8, "hparam/loss": lib.tensor(0.25)},
                      hparam_domain_discrete={"opt": ["adam", "sgd"], "bs": [16, 32]}, run_name="r0")
        w.add_hparams({"lr": 0.01}, {"hparam/acc": 0.9}, run_name="r1", global_step=3)
    a, b = write_both(tmp_path, calls)
    assert runs(a) == runs(b) == ["r0", "r1"]
    for run in ("r0", "r1"):
        ja, pa = accumulate(os.path.join(a, run)), accumulate(os.path.join(b, run))
        assert ja.PluginTagToContent("hparams") == pa.PluginTagToContent("hparams")
        assert len(ja.PluginTagToContent("hparams")) == 3
        assert ja.Tags()["scalars"] == pa.Tags()["scalars"]
        for tag in ja.Tags()["scalars"]:
            assert [(e.step, e.value) for e in ja.Scalars(tag)] == [(e.step, e.value) for e in pa.Scalars(tag)]
    with pytest.raises(TypeError, match="should be dictionary"):
        jt.SummaryWriter(str(tmp_path / "bad")).add_hparams([("lr", 1)], {})
    with pytest.raises(ValueError, match="one of int, float, str"):
        jt.SummaryWriter(str(tmp_path / "bad")).add_hparams({"lr": [1]}, {})


def test_embedding_files_are_torchs(tmp_path):
    rng = np.random.default_rng(2)
    mat = rng.normal(size=(5, 3)).astype(np.float32)
    imgs = rng.uniform(size=(5, 3, 4, 4)).astype(np.float32)

    def calls(w, lib):
        w.add_embedding(lib.tensor(mat), metadata=list("abcde"), label_img=lib.tensor(imgs), global_step=1)
        w.add_embedding(lib.tensor(mat), metadata=[[1, "x"]] * 5, metadata_header=["n", "s"], tag="a/b")
    a, b = write_both(tmp_path, calls)
    files = sorted(os.path.relpath(os.path.join(r, f), a) for r, _, fs in os.walk(a) for f in fs
                   if "tfevents" not in f)
    assert files == sorted(os.path.relpath(os.path.join(r, f), b) for r, _, fs in os.walk(b) for f in fs
                           if "tfevents" not in f)
    assert "00001/default/sprite.png" in files and "00000/a%2fb/metadata.tsv" in files
    for f in files:
        mine, theirs = open(os.path.join(a, f), "rb").read(), open(os.path.join(b, f), "rb").read()
        if f.endswith(".png"):
            np.testing.assert_array_equal(pixels(mine), pixels(theirs))
        else:
            assert mine == theirs, f


def test_purge_step_flush_close_and_reopen(tmp_path):
    def calls(w, lib):
        w.add_scalar("x", 1.0, 5, walltime=WALL)
        w.flush()
        w.close()
        w.add_scalar("x", 2.0, 6, walltime=WALL)  # a closed writer opens a new event file
    a, b = assert_same_events(tmp_path, calls, purge_step=4)
    assert len(os.listdir(a)) == len(os.listdir(b)) == 2
    first = sorted(os.listdir(a))[0]
    header = [e for e in EventFileLoader(os.path.join(a, first)).Load()][:3]
    assert header[1].step == 4 and header[1].file_version == "brain.Event:2"
    assert header[2].session_log.status == header[2].session_log.START


def test_default_log_dir_comment_and_suffix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = jt.SummaryWriter(comment="_exp", filename_suffix=".v1")
    p = tt.SummaryWriter(comment="_pt")
    assert w.log_dir.startswith("runs" + os.sep) and w.log_dir.endswith("_exp") and os.path.isdir(w.log_dir)
    assert os.path.dirname(w.log_dir) == os.path.dirname(p.log_dir) and w.get_logdir() == w.log_dir
    assert [f.endswith(".v1") for f in os.listdir(w.log_dir)] == [True]
    w.close()
    p.close()


def test_add_graph_points_to_fx(tmp_path):
    w = jt.SummaryWriter(str(tmp_path))
    with pytest.raises(NotImplementedError, match="jitorch.fx"):
        w.add_graph(jitorch.nn.Linear(2, 2), jitorch.ones(1, 2))
    w.close()


def test_import_error_names_the_package(monkeypatch):
    for name in [n for n in sys.modules if n.startswith("jitorch.utils.tensorboard")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install tensorboard"):
        import jitorch.utils.tensorboard  # noqa: F401
