"""The summaries of ``SummaryWriter``'s less common writers, built as PyTorch builds them: a whole tensor
(``add_tensor``), meshes and point clouds (``add_mesh``), images with boxes (``add_image_with_boxes``), videos as GIFs
(``add_video``, with moviepy) and ONNX graphs (``add_onnx_graph``, with onnx).

>>> import jitorch
>>> v = tensor_proto("x", jitorch.tensor([1, 2, 3])).value[0]
>>> v.tensor.dtype == 9, list(v.tensor.int64_val), v.metadata.plugin_data.plugin_name  # 9: DT_INT64
(True, [1, 2, 3], 'tensor')
>>> [v.tag for v in mesh("m", jitorch.zeros(1, 4, 3), None, jitorch.zeros(1, 2, 3, dtype=jitorch.int32), None).value]
['m_VERTEX', 'm_FACE']
"""
from __future__ import annotations

import json
import struct
import tempfile

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

from ..._tensor import Tensor
from ._convert_np import make_np
from ._images import convert_to_HWC, make_image, prepare_video

__all__ = ["tensor_proto", "mesh", "image_boxes", "video", "make_video", "load_onnx_graph"]


def _scale_factor(array):
    return 1 if array.dtype == np.uint8 else 255


def _half_val(array):
    # torch stores each value's float32 bit pattern (not its 16 bits) in half_val; readers expect what torch wrote
    return [struct.unpack("i", struct.pack("f", x))[0] for x in array.astype(np.float32).reshape(-1).tolist()]


def _complex_val(array):
    return np.stack([array.real, array.imag], -1).reshape(-1).tolist()


def _plain_val(array):
    return array.reshape(-1).tolist()


def _tensor_fields():
    """jitorch dtype -> (proto dtype, value field, conversion), torch's table (uint8 in uint32_val, as its last
    entry for uint8 says; jitorch has no complex32)."""
    from ... import _dtype as d

    return {d.float16: ("DT_HALF", "half_val", _half_val), d.bfloat16: ("DT_BFLOAT16", "half_val", _half_val),
            d.float32: ("DT_FLOAT", "float_val", _plain_val), d.float64: ("DT_DOUBLE", "double_val", _plain_val),
            d.int8: ("DT_INT8", "int_val", _plain_val), d.uint8: ("DT_UINT8", "uint32_val", _plain_val),
            d.int16: ("DT_INT16", "int_val", _plain_val), d.int32: ("DT_INT32", "int_val", _plain_val),
            d.int64: ("DT_INT64", "int64_val", _plain_val), d.bool: ("DT_BOOL", "bool_val", _plain_val),
            d.complex64: ("DT_COMPLEX64", "scomplex_val", _complex_val),
            d.complex128: ("DT_COMPLEX128", "dcomplex_val", _complex_val)}


def tensor_proto(tag, tensor):
    """The whole ``tensor`` (a jitorch tensor, any device) as a ``TensorProto`` of the ``tensor`` plugin."""
    if not isinstance(tensor, Tensor):
        raise AttributeError(f"add_tensor: '{type(tensor).__name__}' object has no attribute 'numel' (pass a "
                             "jitorch tensor, e.g. jitorch.as_tensor(value))")
    if tensor.numel() * tensor.element_size() >= (1 << 31):
        raise ValueError("tensor is bigger than protocol buffer's hard limit of 2GB in size")
    fields = _tensor_fields()
    if tensor.dtype not in fields:
        raise ValueError(f"{tag} has unsupported tensor dtype {tensor.dtype}")
    dtype, field_name, convert = fields[tensor.dtype]
    array = tensor.detach().cpu().numpy()
    proto = TensorProto(dtype=dtype, tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=x)
                                                                        for x in tensor.shape]),
                        **{field_name: convert(array)})
    smd = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="tensor"))
    return Summary(value=[Summary.Value(tag=tag, metadata=smd, tensor=proto)])


def _as_array(x):
    """``torch.as_tensor``'s reach: tensors, arrays, and nested lists of numbers."""
    return make_np(x) if isinstance(x, (Tensor, np.ndarray)) else np.asarray(x)


def mesh(tag, vertices, colors, faces, config_dict, display_name=None, description=None):
    """One summary value per given part (vertices, faces, colors: each B x N x 3) of the ``mesh`` plugin, tagged
    ``<tag>_VERTEX`` and so on; ``config_dict`` (Three.js camera, lights, materials) travels as JSON."""
    from tensorboard.plugins.mesh import metadata
    from tensorboard.plugins.mesh.plugin_data_pb2 import MeshPluginData

    json_config = "{}" if config_dict is None else json.dumps(config_dict, sort_keys=True)
    parts = [(t, kind) for t, kind in ((vertices, MeshPluginData.VERTEX), (faces, MeshPluginData.FACE),
                                       (colors, MeshPluginData.COLOR)) if t is not None]
    components = metadata.get_components_bitmask([kind for _, kind in parts])
    values = []
    for tensor, kind in parts:
        array = _as_array(tensor)
        smd = metadata.create_summary_metadata(tag, display_name, kind, components, array.shape, description,
                                               json_config=json_config)
        proto = TensorProto(dtype="DT_FLOAT", float_val=array.reshape(-1).tolist(), tensor_shape=TensorShapeProto(
            dim=[TensorShapeProto.Dim(size=array.shape[i]) for i in range(3)]))
        values.append(Summary.Value(tag=metadata.get_instance_name(tag, kind), tensor=proto, metadata=smd))
    return Summary(value=values)


def image_boxes(tag, tensor_image, tensor_boxes, rescale=1, dataformats="CHW", labels=None):
    """A PNG image (as ``image``) with red (xmin, ymin, xmax, ymax) boxes drawn on it, labelled if ``labels``."""
    tensor_image = convert_to_HWC(make_np(tensor_image), dataformats)
    tensor_boxes = make_np(tensor_boxes)
    tensor_image = tensor_image.astype(np.float32) * _scale_factor(tensor_image)
    image = make_image(tensor_image.clip(0, 255).astype(np.uint8), rescale=rescale, rois=tensor_boxes,
                       labels=labels)
    return Summary(value=[Summary.Value(tag=tag, image=image)])


def video(tag, tensor, fps=4):
    """An (N, T, C, H, W) batch of videos tiled into one GIF. Without moviepy the value holds only the tag (torch
    writes it so too, after printing that moviepy is needed)."""
    tensor = prepare_video(make_np(tensor))
    tensor = (tensor.astype(np.float32) * _scale_factor(tensor)).clip(0, 255).astype(np.uint8)
    return Summary(value=[Summary.Value(tag=tag, image=make_video(tensor, fps))])


def make_video(tensor, fps):
    """(T, H, W, C) uint8 frames as a GIF ``Summary.Image`` through moviepy's ``editor``; None (with torch's
    message) without it."""
    try:
        import moviepy  # noqa: F401
    except ImportError:
        print("add_video needs package moviepy")
        return None
    try:
        from moviepy import editor as mpy
    except ImportError:
        print("moviepy is installed, but can't import moviepy.editor.",
              "Some packages could be missing [imageio, requests]")
        return None
    _t, h, w, c = tensor.shape
    clip = mpy.ImageSequenceClip(list(tensor), fps=fps)
    with tempfile.NamedTemporaryFile(suffix=".gif") as f:
        try:  # the keyword that silences the progress bar changed between moviepy versions
            clip.write_gif(f.name, verbose=False, logger=None)
        except TypeError:
            try:
                clip.write_gif(f.name, verbose=False, progress_bar=False)
            except TypeError:
                clip.write_gif(f.name, verbose=False)
        f.seek(0)
        return Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=f.read())


def load_onnx_graph(fname):
    """The ONNX model at ``fname`` as a TensorBoard ``GraphDef``: its inputs and outputs as variables, then one node
    per operator (named by its first output), as torch's; needs the onnx package."""
    import onnx
    from tensorboard.compat.proto.attr_value_pb2 import AttrValue
    from tensorboard.compat.proto.graph_pb2 import GraphDef
    from tensorboard.compat.proto.node_def_pb2 import NodeDef
    from tensorboard.compat.proto.versions_pb2 import VersionDef

    graph = onnx.load(fname).graph
    nodes = []
    for node in [*graph.input, *graph.output]:
        tensor_type = node.type.tensor_type
        shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=d.dim_value) for d in tensor_type.shape.dim])
        nodes.append(NodeDef(name=node.name.encode(encoding="utf_8"), op="Variable", input=[],
                             attr={"dtype": AttrValue(type=tensor_type.elem_type), "shape": AttrValue(shape=shape)}))
    for node in graph.node:
        attr = ", ".join(" = ".join(str(f[1]) for f in a.ListFields()) for a in node.attribute)
        nodes.append(NodeDef(name=node.output[0].encode(encoding="utf_8"), op=node.op_type, input=node.input,
                             attr={"parameters": AttrValue(s=attr.encode(encoding="utf_8"))}))
    return GraphDef(node=nodes, versions=VersionDef(producer=22))
