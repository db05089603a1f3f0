"""Every CUDA template compiles with NVRTC for sm_80 and sm_90 on the CPU, and compile errors are readable."""
from __future__ import annotations

import doctest

import pytest

from jitorch.codegen import cache, cuda_templates, debug, nvrtc
from jitorch.codegen.cuda_templates import (block_reduce_kernel, elementwise_kernel, needs_index64,
                                            two_pass_reduce_kernels)

GELU = "0.5f * x0 * (1.0f + tanhf(0.7978845608f * (x0 + 0.044715f * x0 * x0 * x0)))"

# (id, source, entry symbols): the canonical kernels jitorch launches on CUDA.
KERNELS = [
    ("add", elementwise_kernel("add", "x0 + x1", ["float", "float"]), ["add"]),
    ("gelu_tanh", elementwise_kernel("gelu", GELU, ["float"]), ["gelu"]),
    ("sigmoid_f64", elementwise_kernel("sigmoid", "1.0 / (1.0 + exp(-x0))", ["double"], "double"), ["sigmoid"]),
    ("where", elementwise_kernel("where3", "x0 ? x1 : x2", ["bool", "float", "float"]), ["where3"]),
    ("add_float4", elementwise_kernel("add4", "x0 + x1", ["float", "float"], vectorize=True), ["add4"]),
    ("add_large_n", elementwise_kernel("add_big", "x0 + x1", ["float", "float"], index64=needs_index64(2**31 + 5)),
     ["add_big"]),
    ("gelu_float4_large_n", elementwise_kernel("gelu_big", GELU, ["float"], vectorize=True, index64=True),
     ["gelu_big"]),
    ("max_reduce", block_reduce_kernel("row_max", "max"), ["row_max"]),
    ("sum_reduce", block_reduce_kernel("row_sum", "sum"), ["row_sum"]),
    ("min_reduce_f64", block_reduce_kernel("row_min", "min", "double"), ["row_min"]),
    ("sum_squares_large_n", block_reduce_kernel("row_sq", "sum", map_expr="x0 * x0", index64=True), ["row_sq"]),
    ("two_pass_sum", two_pass_reduce_kernels("total", "sum"), ["total_partial", "total_final"]),
    ("two_pass_max_f64", two_pass_reduce_kernels("big_max", "max", "double"), ["big_max_partial", "big_max_final"]),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source, entries", [k[1:] for k in KERNELS], ids=[k[0] for k in KERNELS])
def test_every_template_compiles_to_a_cubin_defining_its_entries(source, entries, arch):
    for entry in entries:
        result = nvrtc.compile(source, entry, arch=arch)
        assert result.cubin[:4] == b"\x7fELF"
        assert result.arch == arch
        assert result.log == "", f"NVRTC warnings:\n{result.log}"
        assert entry.encode() in result.cubin
        assert set(entries) <= nvrtc.cubin_function_symbols(result.cubin)


def test_templates_also_compile_with_minimal_headers():
    # NOTE: --minimal roughly halves NVRTC time; it works because the templates use no header (not even INFINITY).
    for _, source, entries in KERNELS:
        assert nvrtc.compile_cubin(source, entries[0], arch=90, options=("--minimal",))[:4] == b"\x7fELF"


def test_index_width_follows_n():
    assert not needs_index64(2**31 - 1) and needs_index64(2**31)
    small = elementwise_kernel("k", "x0", ["float"], index64=needs_index64(1000))
    large = elementwise_kernel("k", "x0", ["float"], index64=needs_index64(2**31))
    assert "long long" not in small and "const unsigned int n" in small
    assert "const long long n" in large and "unsigned int" not in large
    assert "long long" in two_pass_reduce_kernels("t", "sum") and "long long" in block_reduce_kernel(
        "r", "max", index64=True)


def test_float4_path_keeps_a_scalar_tail():
    source = elementwise_kernel("k", "x0 * x1", ["float", "float"], vectorize=True)
    assert "reinterpret_cast<const float4*>(in0)[i]" in source
    assert "for (unsigned int i = n4 * 4 + start; i < n; i += stride)" in source


@pytest.mark.parametrize("bad", [
    dict(name="k", expr="x0", in_types=["float"], vectorize=True, out_type="double"),
    dict(name="k", expr="x0", in_types=[]),
    dict(name="k-1", expr="x0", in_types=["float"]),
    dict(name="k", expr="x0", in_types=["half"]),
])
def test_elementwise_rejects_bad_arguments(bad):
    with pytest.raises(ValueError):
        elementwise_kernel(**bad)


def test_reductions_reject_unknown_ops_and_types():
    with pytest.raises(ValueError, match="prod"):
        block_reduce_kernel("r", "prod")
    with pytest.raises(ValueError, match="int"):
        two_pass_reduce_kernels("r", "sum", "int")
    with pytest.raises(ValueError, match="multiple of 32"):
        cuda_templates.two_pass_plan("r", 100, block=100)


def test_broken_source_raises_compile_error_with_numbered_line_and_log():
    source = 'extern "C" __global__ void k(float* out) {\n    out[0] = undefined_name;\n}\n'
    with pytest.raises(nvrtc.CompileError) as info:
        nvrtc.compile(source, "k", arch="sm_80")
    message = str(info.value)
    assert "   2 |     out[0] = undefined_name;" in message
    assert 'identifier "undefined_name" is undefined' in message and "k.cu(2): error" in message
    assert "   1 | extern" in message and "   3 | }" in message  # the full listing follows
    assert info.value.source == source and "undefined_name" in info.value.log
    assert "--gpu-architecture=sm_80" in info.value.options


def test_a_broken_template_expression_points_at_the_device_function():
    source = elementwise_kernel("k", "x0 +* x1", ["float", "float"])
    with pytest.raises(nvrtc.CompileError, match=r"   3 \|     return x0 \+\* x1;"):
        nvrtc.compile(source, "k", arch=90)


def test_missing_entry_symbol_is_a_compile_error():
    with pytest.raises(nvrtc.CompileError, match="entry symbol 'k' is not defined"):
        nvrtc.compile("__global__ void k(float* out) {}", "k")  # C++ mangles the name without extern "C"
    with pytest.raises(nvrtc.CompileError, match="entry symbol 'other'"):
        nvrtc.compile(KERNELS[0][1], "other")


def test_arch_spellings_and_version():
    assert [nvrtc.normalize_arch(a) for a in (80, "90", "sm_80", "compute_90", "sm_90a")] == [
        "sm_80", "sm_90", "sm_80", "sm_90", "sm_90a"]
    with pytest.raises(ValueError, match="SM architecture"):
        nvrtc.normalize_arch("ampere")
    assert nvrtc.version() >= (12, 0) and {80, 90} <= set(nvrtc.supported_archs())
    parts = nvrtc.key_parts("src", 80)
    assert parts["target"] == "sm_80" and parts["compiler"].startswith("nvrtc-")
    assert cache.cache_key(parts) != cache.cache_key(nvrtc.key_parts("src", 90))


def test_missing_library_raises_a_clear_error(monkeypatch):
    monkeypatch.setattr(nvrtc, "_candidate_paths", lambda: ["/nonexistent/libnvrtc.so.13"])
    nvrtc.load_library.cache_clear()
    try:
        with pytest.raises(nvrtc.NvrtcUnavailable, match="pip install nvidia-cuda-nvrtc"):
            nvrtc.load_library()
    finally:
        monkeypatch.undo()
        nvrtc.load_library.cache_clear()
    assert nvrtc.load_library() is not None


def test_debug_levels_log_compiles_and_sources(monkeypatch, capsys):
    source = KERNELS[0][1]
    monkeypatch.setenv("JITORCH_DEBUG", "1")
    nvrtc.compile(source, "add", arch=80)
    err = capsys.readouterr().err
    assert "nvrtc compile add [sm_80]:" in err and " ms" in err and "__global__" not in err
    monkeypatch.setenv("JITORCH_DEBUG", "2")
    nvrtc.compile(source, "add", arch=80)
    err = capsys.readouterr().err
    assert "source of add" in err and '   6 | extern "C" __global__ void add(' in err
    monkeypatch.setenv("JITORCH_DEBUG", "0")
    nvrtc.compile(source, "add", arch=80)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("module", [nvrtc, cuda_templates, debug, cache])
def test_docstring_examples_run(module, monkeypatch):
    # The templates' docstrings are golden snapshots of the emitted source, so this also pins the generated text.
    monkeypatch.delenv("JITORCH_CACHE_DIR", raising=False)
    monkeypatch.delenv("JITORCH_DEBUG", raising=False)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
