"""Fused groups on CUDA tensors: the IR a `lower.GroupKernel` builds, as CUDA C compiled by NVRTC and launched via CuPy.

`CompiledGraph` hands a group's input arrays here when any of them is a device array (`on_device`). The group's
expressions are the ones the LLVM backend compiles (`GroupKernel` builds them once); only the buffers differ: each
input slot is a view with element strides over the group's iteration space, passed as a pointer to its lowest
element plus an element offset, so negative strides never need a signed 32-bit index. Per (device, stride pattern)
the kernel is built once: `codegen.cuda_launch.build_program` emits the source (one kernel, or a partial and a
final kernel for a huge reduction with few outputs), compiles a cubin for the device's ``sm_<major><minor>`` through
the compile cache (memory and ``$JITORCH_CACHE_DIR``), and plans grid, block and arguments; the cubins are loaded
into the device's context once. A call allocates the outputs (and any workspace) with CuPy, which goes through
jitorch's caching allocator, and enqueues the launches on CuPy's current stream, so the kernels are ordered with
the eager ops around them and with the user's ``jitorch.cuda.stream`` contexts; nothing synchronizes.

A group the CUDA emitter cannot express (an ``argmax`` row, say) runs its nodes eagerly on the device instead, once
and for all: the reason is kept in ``CudaGroupKernel.eager_reason``.

The device access goes through one object (`set_device_backend` swaps it): CuPy on a real GPU, a recording fake in
the CPU tests, which run this whole path up to the launch on fake device arrays.

>>> import numpy as np
>>> on_device([np.zeros(3)])
False
"""
from __future__ import annotations

import re
import threading
import weakref

import numpy as np

from .._tensor import Tensor
from ..codegen import cuda_launch
from ..codegen.cuda_ops import UnsupportedPrimitive
from ..codegen.ir import Buffer, Kernel
from ..codegen.llvm_objcache import default_cache, jitorch_version
from ..fx.node import Node, map_aggregate
from ..runtime import devices
from .lower import FUSED_DTYPES, memo_build

__all__ = ["CudaGroupKernel", "CupyDevice", "on_device", "run", "set_device_backend", "cuda_kernel_stats",
           "clear_cuda_kernel_cache"]

_NP = {v: k for k, v in FUSED_DTYPES.items()}
_lock = threading.Lock()
_PROGRAMS: dict[tuple, cuda_launch.CudaProgram] = {}
_STATS = {"compiles": 0, "hits": 0, "launches": 0, "eager_groups": 0, "compile_s": 0.0}
_KERNELS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # GroupKernel -> CudaGroupKernel
_BACKEND: list = []


def on_device(arrays):
    """Whether any of ``arrays`` lives on a CUDA device (implements ``__cuda_array_interface__``, as CuPy's do).

    The attribute is looked up on the type, so a lazy array is never made to compute its value by the question.
    """
    return any(hasattr(type(a), "__cuda_array_interface__") for a in arrays)


class CupyDevice:
    """The real device: CuPy arrays and streams, device facts from `jitorch.runtime`, cubins loaded by CuPy."""

    def __init__(self):
        self.xp = devices.array_module_for("cuda")

    def scope(self, index):
        return self.xp.cuda.Device(index)

    def arch(self, index):
        major, minor = devices.compute_capability(index)
        return f"sm_{major}{minor}"

    def sm_count(self, index):
        return devices.multiprocessor_count(index)

    def stream(self):
        return self.xp.cuda.get_current_stream()

    def pointer(self, array):
        return array.data.ptr

    def load(self, program):
        return cuda_launch.load_functions(program)

    def launch(self, function, grid, block, args, stream):
        cuda_launch.launch(function, grid, block, args, stream)


def set_device_backend(backend):
    """Use ``backend`` (an object with `CupyDevice`'s methods and ``xp``) for CUDA groups; None restores CuPy.
    Returns the previous one (None when it was the default)."""
    previous = _BACKEND[0] if _BACKEND else None
    _BACKEND[:] = [] if backend is None else [backend]
    return previous


def _backend():
    if not _BACKEND:
        _BACKEND.append(CupyDevice())
    return _BACKEND[0]


def cuda_kernel_stats():
    """``{"compiles", "hits", "launches", "eager_groups", "compile_s", "programs"}`` of the CUDA path."""
    with _lock:
        return dict(_STATS, programs=len(_PROGRAMS))


def clear_cuda_kernel_cache():
    """Forget built programs and loaded kernels (the disk cache of cubins stays)."""
    with _lock:
        _PROGRAMS.clear()
        _KERNELS.clear()
        _STATS.update(compiles=0, hits=0, launches=0, eager_groups=0, compile_s=0.0)


def run(group_kernel, arrays):
    """Run the fused group of ``group_kernel`` (a `lower.GroupKernel`) on device ``arrays``; returns its outputs."""
    with _lock:
        kernel = _KERNELS.get(group_kernel)
        if kernel is None:
            kernel = _KERNELS[group_kernel] = CudaGroupKernel(group_kernel)
    return kernel(arrays)


def _kernel_name(ops):
    """A C identifier naming the group by its first ops (what a profiler shows), e.g. ``jt_mul_add_tanh``."""
    words = [re.sub(r"\W", "", name).strip("_") for name in ops[:4]]
    return "jt_" + "_".join(w for w in words if w)[:48].rstrip("_") if any(words) else "jt_fused"


def _program(kernel, name, arch, sm_count):
    return memo_build(_PROGRAMS, _STATS, _lock, (str(kernel), name, arch, sm_count),
                      lambda: cuda_launch.build_program(kernel, name, arch, sm_count=sm_count, cache=default_cache(),
                                                        extra_key={"jitorch": jitorch_version()}))


def _device_index(arrays):
    found = {devices.array_device(a) for a in arrays if on_device([a])}
    cpu = [a for a in arrays if not on_device([a]) and np.ndim(a) > 0]
    if len(found) > 1 or cpu:
        names = sorted(f"cuda:{i}" for _, i in found) + (["cpu"] if cpu else [])
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{names[0]} and {names[1]}! (a compiled fused kernel; move the inputs with .to())")
    return found.pop()[1]


def _run_eagerly(group, arrays):
    """The group's nodes one by one through the dispatcher (on the device), for a kernel CUDA C cannot express."""
    env = {n: Tensor._make(a) for n, a in zip(group.inputs, arrays)}
    for m in group.nodes:
        args = map_aggregate(m.args, lambda a: env[a] if isinstance(a, Node) else a)
        kwargs = map_aggregate(m.kwargs, lambda a: env[a] if isinstance(a, Node) else a)
        env[m] = m.target(*args, **kwargs)
    return [env[o]._data for o in group.outputs]


class CudaGroupKernel:
    """``kernel(device_arrays) -> output arrays`` for one `lower.GroupKernel`; one built program per (device, stride
    pattern), as the LLVM path keeps one compiled variant per stride pattern."""

    def __init__(self, group_kernel):
        self.gk = group_kernel
        self.name = _kernel_name(group_kernel.group.ops)
        self.variants: dict[tuple, tuple] = {}
        self.eager_reason: str | None = None

    def __call__(self, arrays):
        dev, gk = _backend(), self.gk
        index = _device_index(arrays)
        with dev.scope(index):
            xp = dev.xp
            arrays = [a if on_device([a]) else xp.asarray(a) for a in arrays]  # 0-d CPU tensors move, as eager
            if self.eager_reason is not None:
                return _run_eagerly(gk.group, arrays)
            outs = [xp.empty(shape, _NP[dt]) for shape, dt in zip(gk.out_shapes, gk.out_dtypes)]
            if (gk.outer_numel if gk.reduce_axes else gk.numel) == 0:
                return outs
            slots = self._slot_views(xp, arrays)
            key = (index, tuple((st, off) for _, st, off in slots))
            variant = self.variants.get(key)
            if variant is None:
                try:
                    program = _program(self.kernel(slots), self.name, dev.arch(index), dev.sm_count(index))
                except UnsupportedPrimitive as err:
                    self.eager_reason = str(err)
                    with _lock:
                        _STATS["eager_groups"] += 1
                    return _run_eagerly(gk.group, arrays)
                variant = self.variants[key] = (program, dev.load(program))
            program, functions = variant
            pointers = [dev.pointer(o) for o in outs]
            pointers += [dev.pointer(v) - off * v.itemsize for v, _, off in slots]  # the lowest element
            args = {f"buf{i}": p for i, p in enumerate(pointers)}
            # Workspaces die with this call: their memory returns to the pool in stream order, after the launches.
            workspaces = [xp.empty(n, _NP[dt]) for dt, n in program.workspaces]
            args.update((f"ws{n}", dev.pointer(w)) for n, w in enumerate(workspaces))
            stream = dev.stream()
            launches = program.launches_for(args)
            for launch in launches:
                dev.launch(functions[launch.function], launch.grid, launch.block, [args[a] for a in launch.args],
                           stream)
            with _lock:
                _STATS["launches"] += len(launches)
            return outs

    def kernel(self, slots):
        """The IR kernel for these ``(view, element strides, element offset)`` slots."""
        k = self.gk.build([st for _, st, _ in slots])
        nouts = len(self.gk.out_shapes)
        buffers = k.buffers[:nouts] + tuple(Buffer(b.dtype, b.strides, off)
                                            for b, (_, _, off) in zip(k.buffers[nouts:], slots))
        return Kernel(k.shape, buffers, k.stores, k.reduce_axes)

    def _slot_views(self, xp, arrays):
        """Per load slot: (view, element strides over the iteration space, element offset of the view's element 0
        from its lowest-addressed element), in buffer order."""
        shape = self.gk.shape
        return [(b, strides, -sum(min(0, s * (n - 1)) for s, n in zip(strides, shape) if n > 0))
                for b, strides in self.gk._slot_views(arrays, xp)]
