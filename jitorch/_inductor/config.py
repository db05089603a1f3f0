"""``torch._inductor.config`` as scripts use it: ``config.coordinate_descent_tuning = True``,
``config.triton.cudagraphs = False``, ``config.patch(...)``. Every name of torch 2.13's Inductor configuration is
accepted (`OPTION_NAMES`, also ``jitorch.compile``'s ``options`` keys); values are kept and read back, and change
nothing: jitorch compiles with its own code generator.

>>> from jitorch._inductor import config
>>> config.coordinate_descent_tuning = True
>>> config.triton.cudagraphs = False
>>> config.coordinate_descent_tuning, config.triton.cudagraphs
(True, False)
"""
from __future__ import annotations

import sys
import types

from .._attr_patch import AttrPatch

__all__ = ["OPTION_NAMES", "patch"]

# torch 2.13's torch._inductor.config keys (public ones; dotted names are nested namespaces).
OPTION_NAMES = frozenset("""
add_pre_grad_passes aggressive_fusion align_random_eager alignment_asserts allow_buffer_reuse
always_keep_tensor_constants annotate_training aot_inductor.allow_stack_allocation aot_inductor.aoti_shim_library
aot_inductor.aoti_shim_library_path aot_inductor.autotune_per_kernel_alloc aot_inductor.check_lowerbound
aot_inductor.compile_wrapper_opt_level aot_inductor.cross_target_platform aot_inductor.custom_op_libs
aot_inductor.custom_ops_to_c_shims aot_inductor.debug_compile aot_inductor.debug_intermediate_value_printer
aot_inductor.debug_symbols aot_inductor.dump_aoti_minifier aot_inductor.dynamic_linkage
aot_inductor.embed_kernel_binary aot_inductor.emit_multi_arch_kernel aot_inductor.enable_frame_pointer
aot_inductor.enable_line_tables aot_inductor.enable_lto aot_inductor.filtered_kernel_names
aot_inductor.force_mmap_weights aot_inductor.link_libtorch aot_inductor.metadata
aot_inductor.model_name_for_generated_files aot_inductor.output_path aot_inductor.package
aot_inductor.package_constants_in_so aot_inductor.package_constants_on_disk_format aot_inductor.package_cpp_only
aot_inductor.precompile_headers aot_inductor.presets aot_inductor.raise_error_on_ignored_optimization
aot_inductor.repro_level aot_inductor.serialized_in_spec aot_inductor.serialized_out_spec
aot_inductor.use_consts_asm_build aot_inductor.use_minimal_arrayref_interface
aot_inductor.use_runtime_constant_folding aot_inductor.weight_use_caching_allocator
aot_inductor_mode.compile_standalone apply_gumbel_max_trick assert_indirect_indexing assume_32bit_indexing
assume_aligned_inputs assume_unaligned_fallback_output aten_distributed_optimizations.allow_comms_decompositions
aten_distributed_optimizations.bucket_exposed_first aten_distributed_optimizations.bucket_mode
aten_distributed_optimizations.bucket_only_internode_comms aten_distributed_optimizations.collective_bucketing
aten_distributed_optimizations.collective_estimator aten_distributed_optimizations.compute_estimator
aten_distributed_optimizations.compute_overlap_multipler aten_distributed_optimizations.custom_runtime_estimation
aten_distributed_optimizations.enable_fusion_regions
aten_distributed_optimizations.enable_low_contention_collectives
aten_distributed_optimizations.enable_overlap_scheduling aten_distributed_optimizations.insert_overlap_deps
aten_distributed_optimizations.log_final_collectives_estimations
aten_distributed_optimizations.low_contention_min_bytes_per_rank
aten_distributed_optimizations.low_contention_skip_overlap_check aten_distributed_optimizations.max_coll_distance
aten_distributed_optimizations.max_compute_pre_fetch aten_distributed_optimizations.max_in_flight_gb
aten_distributed_optimizations.max_memory_increase_gb aten_distributed_optimizations.max_memory_increase_ratio
aten_distributed_optimizations.overlap_scheduling_autofix_cycles
aten_distributed_optimizations.pre_bucketing_fsdp_collectives
aten_distributed_optimizations.pre_bucketing_fsdp_collectives_bucket_cap_mb
aten_distributed_optimizations.pre_bucketing_fsdp_collectives_max_bucket_cap_mb
aten_distributed_optimizations.pre_bucketing_fsdp_collectives_min_bucket_cap_mb
aten_distributed_optimizations.pre_bucketing_fsdp_collectives_saturation_calibration_multiplier
aten_distributed_optimizations.pre_bucketing_fsdp_collectives_verbose
aten_distributed_optimizations.prioritize_bucketing_during_scheduling
aten_distributed_optimizations.profile_guided_estimations_profile_path aten_distributed_optimizations.spmd_check
aten_distributed_optimizations.spmd_mismatch auto_chunker.amplify_ratio_threshold auto_chunker.enable
auto_chunker.num_chunk auto_chunker.output_size_threshold autoheuristic_collect.mixed_mm
autoheuristic_collect.pad_mm autoheuristic_log_path autoheuristic_use.mixed_mm autoheuristic_use.pad_mm
autotune_fallback_to_aten autotune_in_subproc autotune_local_cache autotune_lookup_table autotune_multi_device
autotune_num_choices_displayed autotune_remote_cache b2b_gemm_pass batch_fusion batch_invariant
benchmark_combo_kernel benchmark_epilogue_fusion benchmark_fusion benchmark_harness benchmark_kernel
bucket_all_gathers_bucket_mode bucket_all_gathers_fx bucket_all_gathers_fx_bucket_size_determinator
bucket_all_reduces_fx bucket_all_reduces_fx_bucket_size_determinator bucket_reduce_scatters_bucket_mode
bucket_reduce_scatters_fx bucket_reduce_scatters_fx_bucket_size_determinator bundle_triton_into_fx_graph_cache
bundled_autotune_remote_cache bw_outputs_user_visible cache_sdpa_constraint can_inplace_pad_graph_input
check_stack_no_cycles_TESTING_ONLY collective_benchmark_nruns collective_benchmark_timeout
combo_kernel_allow_mixed_sizes combo_kernel_autotune_grouping combo_kernel_foreach_dynamic_shapes
combo_kernel_max_distance combo_kernel_max_num_args combo_kernel_max_num_nodes combo_kernel_peak_memory_increase_gb
combo_kernel_peak_memory_pct_threshold combo_kernel_per_subkernel_blocks combo_kernels combo_kernels_autotune
combo_kernels_pointwise_only comment_origin compile_threads compile_worker_wait_timeout comprehensive_padding
compute_all_bounds constant_and_index_propagation conv_1x1_as_mm coordinate_descent_check_all_directions
coordinate_descent_search_radius coordinate_descent_tuning cpp.cxx cpp.descriptive_names cpp.dynamic_threads
cpp.enable_concat_linear cpp.enable_floating_point_contract_flag cpp.enable_grouped_gemm_template
cpp.enable_kernel_profile cpp.enable_loop_tail_vec cpp.enable_tiling_heuristics cpp.enable_unsafe_math_opt_flag
cpp.fallback_scatter_reduce_sum cpp.force_inline_kernel cpp.gemm_cache_blocking cpp.gemm_max_k_slices
cpp.gemm_thread_factors cpp.inject_log1p_bug_TESTING_ONLY cpp.inject_relu_bug_TESTING_ONLY cpp.march
cpp.max_horizontal_fusion_size cpp.min_chunk_size cpp.no_redundant_loops cpp.simdlen cpp.threads
cpp.use_constexpr_for_int_array cpp.use_decompose_tanh cpp.use_small_dequant_buffer
cpp.use_two_step_variance_threshold cpp.vec_isa_ok cpp.weight_prepack cpp_cache_precompile_headers cpp_wrapper
cpp_wrapper_build_separate cpu_backend cpu_gpu_bw cuda.arch cuda.binary_remote_cache_force_write
cuda.compile_opt_level cuda.cuda_cxx cuda.cutlass_backend_min_gemm_size cuda.cutlass_dir
cuda.cutlass_dynamic_cluster_fallback cuda.cutlass_dynamic_cluster_shape cuda.cutlass_enabled_ops
cuda.cutlass_epilogue_fusion_enabled cuda.cutlass_hash_with_compile_cmd cuda.cutlass_instantiation_level
cuda.cutlass_max_profiling_configs cuda.cutlass_max_profiling_swizzle_options cuda.cutlass_op_allowlist_regex
cuda.cutlass_op_denylist_regex cuda.cutlass_prescreening cuda.cutlass_tma_only cuda.enable_caching_codegen
cuda.enable_cuda_lto cuda.enable_debug_info cuda.enable_ptxas_info cuda.generate_test_runner
cuda.nvgemm_max_profiling_configs cuda.upload_to_binary_remote_cache cuda.use_binary_remote_cache cuda.use_fast_math
cuda.version cuda_backend cudagraph_policy cudagraph_unsafe_unbacked_ops custom_partitioner_fn
custom_should_partition_ops cutedsl_enable_autotuning cutlass.binary_remote_cache_force_write
cutlass.compile_opt_level cutlass.cutlass_backend_min_gemm_size cutlass.cutlass_dir
cutlass.cutlass_dynamic_cluster_fallback cutlass.cutlass_dynamic_cluster_shape cutlass.cutlass_enabled_ops
cutlass.cutlass_epilogue_fusion_enabled cutlass.cutlass_hash_with_compile_cmd cutlass.cutlass_instantiation_level
cutlass.cutlass_max_profiling_configs cutlass.cutlass_max_profiling_swizzle_options
cutlass.cutlass_op_allowlist_regex cutlass.cutlass_op_denylist_regex cutlass.cutlass_prescreening
cutlass.cutlass_tma_only cutlass.enable_caching_codegen cutlass.enable_debug_info cutlass.generate_test_runner
cutlass.upload_to_binary_remote_cache cutlass.use_binary_remote_cache cutlass.use_fast_math dce debug debug_fusion
debug_index_asserts debug_ir_traceback decompose_mem_bound_mm dedup_reduce_scatters delay_realize_cheap_outputs
deterministic developer_warnings disable_cpp_codegen disable_padding_cpu disable_progress disabled_passes
distributed_max_autotune_gemm do_not_emit_runtime_assertions dynamic_scale_rblock eager_numerics.disable_ftz
eager_numerics.division_rounding eager_numerics.use_pytorch_libdevice efficient_conv_bn_eval_fx_passes
emulate_precision_casts emulate_precision_casts_on_saved_tensors enable_auto_functionalized_v2
enable_autograd_for_aot enable_caching_generated_triton_templates enable_linear_binary_folding enabled_metric_tables
epilogue_fusion epilogue_fusion_first epilogue_fusion_user_defined_triton_kernel epilogue_fusion_with_atomic_add
estimate_op_runtime expand_dimension_for_pointwise_nodes external_matmul fallback_by_default
fallback_embedding_bag_byte_unpack fallback_random file_lock_timeout force_disable_caches
force_disable_cudagraph_TESTING_ONLY force_fuse_int_mm_with_mul force_layout_optimization force_pointwise_cat
force_shape_pad freezing freezing_discard_parameters fx_graph_cache fx_graph_remote_cache fx_passes_numeric_check
fx_wrapper generate_intermediate_hooks global_cache_dir graph_partition group_fusion halide.asserts
halide.cpu_target halide.debug halide.gpu_target halide.scan_kernels halide.scheduler_cpu halide.scheduler_cuda
implicit_fallbacks incremental_autotune inductor_choices_class inductor_default_autotune_rep
inductor_default_autotune_warmup inplace_buffers inplace_padding inter_node_bw intra_node_bw is_nightly_or_source
is_predispatch joint_custom_post_pass joint_custom_pre_pass joint_graph_constant_folding
keep_addmm_fused_for_half_dtypes keep_output_stride keep_static_cubin_raw kernel_name_max_ops layout_opt_default
layout_optimization log_tlparse lookup_table.check_src_hash lookup_table.table loop_index_inversion_in_fusion
loop_ordering_after_fusion loop_reindexing_after_fusion max_autotune max_autotune_allow_flexible_layouts
max_autotune_conv_backends max_autotune_conv_bwd_input_backends max_autotune_conv_bwd_weight_backends
max_autotune_flex_search_space max_autotune_gemm max_autotune_gemm_backends max_autotune_gemm_search_space
max_autotune_pointwise max_autotune_prune_choices_based_on_shared_mem max_autotune_report_choices_stats
max_autotune_subproc_graceful_timeout_seconds max_autotune_subproc_result_timeout_seconds
max_autotune_subproc_terminate_timeout_seconds max_complex_pointwise_cat_inputs max_epilogue_benchmarked_choices
max_fusion_buffer_group_pairwise_attempts max_fusion_size max_fusion_unique_io_buffers max_pointwise_cat_inputs
memory_planning memory_pool min_num_split min_overlap_ratio mixed_mm_choice mtia.disable_welford_reduction
multi_kernel_hints nan_asserts non_blocking_remote_cache_write nvgemm_max_profiling_configs
nvgemm_supplement_configs online_softmax optimize_scatter_upon_const_tensor pad_channels_last pad_dynamic_shapes
pad_outputs padding_alignment_bytes padding_stride_threshold partitioned_scatter_enabled
partitioned_scatter_max_partitions partitioned_scatter_memory_budget partitioned_scatter_min_partitions
pattern_matcher permute_fusion pick_loop_orders pipeline_max_autotune_gemm post_grad_custom_post_pass
post_grad_custom_pre_pass post_grad_fusion_options pre_grad_custom_pass pre_grad_fusion_options pre_grad_pass_timing
precompilation_timeout_seconds profile_bandwidth profile_bandwidth_output profile_bandwidth_regex
profile_bandwidth_with_do_bench_using_profiling profiler_mark_wrapper_call prologue_fusion
quiesce_async_compile_pool quiesce_async_compile_time realize_acc_reads_size_threshold realize_acc_reads_threshold
realize_cpu_acc_reads_threshold realize_cpu_opcount_threshold realize_opcount_threshold realize_reads_threshold
remote_gemm_autotune_cache remove_pre_grad_passes reorder_for_compute_comm_overlap
reorder_for_compute_comm_overlap_passes reorder_for_locality reorder_for_peak_memory reorder_for_peak_memory_debug
reorder_prefetch_limit rocm.arch rocm.ck_dir rocm.ck_max_profiling_configs rocm.ck_supported_arch
rocm.ck_tile_max_profiling_configs rocm.compile_opt_level rocm.contiguous_threshold rocm.flush_denormals
rocm.generate_test_runner rocm.is_debug rocm.kBatch_sweep rocm.n_max_profiling_configs rocm.origami
rocm.origami_topk rocm.print_kernel_resource_usage rocm.rocm_home rocm.save_temps rocm.split_k_threshold
rocm.use_fast_math rocm.use_preselected_instances run_jit_post_compile_hook runtime_estimations_mms_benchmark
runtime_triton_nan_asserts save_args scalar_asserts score_fusion_memory_threshold search_autotune_cache
selective_decompose shape_padding size_asserts size_threshold_for_succ_based_strategy sleep_sec_TESTING_ONLY
small_memory_access_threshold split_cat_fx_passes split_reductions static_launch_user_defined_triton_kernels
static_weight_shapes strict_static_cuda_launcher strict_static_triton_launcher
test_configs.assume_bucketing_reduces_latency test_configs.autotune_choice_desc_regex
test_configs.autotune_choice_name_regex test_configs.bisect_keep_custom_backend_for_inductor
test_configs.bisect_pre_grad_graph test_configs.distort_benchmarking_result
test_configs.force_custom_op_decomposition test_configs.force_extern_kernel_in_multi_template
test_configs.force_filter_reduction_configs test_configs.force_no_impl_grouping
test_configs.graphsafe_rng_func_ignores_fallback_random test_configs.max_flex_configs test_configs.max_mm_configs
test_configs.runtime_triton_dtype_assert test_configs.runtime_triton_shape_assert
test_configs.static_cpp_dtype_assert test_configs.track_memory_lifecycle test_configs.use_libtorch
torchinductor_worker_logpath tpu_backend trace.compile_profile trace.debug_dir trace.debug_log trace.dot_graph_shape
trace.draw_orig_fx_graph trace.enabled trace.fx_graph trace.fx_graph_transformed trace.graph_diagram
trace.graph_diagram_format trace.info_log trace.ir_post_fusion trace.ir_pre_fusion trace.log_autotuning_results
trace.log_url_for_graph_xform trace.orig_fx_graph_diagram_format trace.output_code trace.provenance_tracking_level
trace.save_real_tensors trace.upload_tar triton.autotune_at_compile_time triton.autotune_cublasLt
triton.autotune_pointwise triton.autotune_with_sample_inputs triton.coalesce_tiling_analysis
triton.codegen_upcast_to_fp32 triton.cooperative_reductions triton.cudagraph_capture_sizes
triton.cudagraph_dynamic_shape_warn_limit triton.cudagraph_min_partition_size triton.cudagraph_or_error
triton.cudagraph_partition_memory_budget triton.cudagraph_skip_dynamic_graphs
triton.cudagraph_support_input_mutation triton.cudagraph_trees triton.cudagraph_trees_history_recording
triton.cudagraph_trees_objgraph triton.cudagraph_unexpected_rerecord_limit triton.cudagraphs
triton.debug_dump_kernel_inputs triton.debug_sync_graph triton.debug_sync_kernel triton.decompose_k_threshold
triton.decompose_sort_ops triton.dense_indexing triton.descriptive_names
triton.disallow_failing_autotune_kernels_TESTING_ONLY triton.divisible_by_16 triton.dynamic_disable_pipelining
triton.emit_pointer_range_32 triton.enable_pdl triton.enable_persistent_tma_matmul triton.enable_template_tma_store
triton.enable_tma_load_for_template_epilogue triton.fast_path_cudagraph_asserts triton.force_cooperative_reductions
triton.force_cudagraph_sync triton.force_cudagraphs_warmup triton.inject_relu_bug_TESTING_ONLY
triton.max_kernel_dump_occurrences triton.max_tiles triton.min_split_scan_rblock triton.mix_order_reduction
triton.mix_order_reduction_allow_multi_stages triton.mix_order_reduction_autotune_split_size
triton.mix_order_reduction_initial_xblock triton.mix_order_reduction_max_reads
triton.mix_order_reduction_non_strict_mode triton.mix_order_reduction_split_size triton.multi_kernel
triton.native_matmul triton.nested_reduction triton.num_decompose_k_splits triton.persistent_reductions
triton.prefer_nd_tiling triton.proton_group_by_sm triton.proton_output_dir triton.proton_per_cta_occupancy
triton.proton_profiling triton.proton_split_invocations triton.reorder_for_reducing_graph_partitions
triton.skip_cudagraph_warmup triton.skip_l1_cache triton.slow_path_cudagraph_asserts triton.spill_threshold
triton.store_cubin triton.tile_reductions triton.tiling_prevents_pointwise_fusion
triton.tiling_prevents_reduction_fusion triton.transpose_discontiguous_tensor_descriptor triton.unique_kernel_names
triton.unique_user_kernel_names triton.use_block_ptr triton.use_tensor_descriptor
triton.use_two_step_variance_min_numel triton.use_two_step_variance_threshold triton_disable_device_detection
triton_kernel_default_layout_constraint unbacked_symint_fallback unroll_reductions_threshold
unsafe_ignore_unsupported_triton_autotune_args unsafe_marked_cacheable_functions
unsafe_skip_cache_dynamic_shape_guards use_dce use_experimental_benchmarker use_fast_math use_fast_triton_launcher
use_joint_graph_passes use_launch_metadata_schema use_mixed_mm use_post_grad_passes use_pre_grad_passes
use_static_cuda_launcher use_static_triton_launcher use_torch_profiler_benchmarker verbose_progress warn_mix_layout
worker_log_path worker_start_method worker_suppress_logging wrap_inductor_compiled_regions
write_are_deterministic_algorithms_enabled xpu.arch xpu.binary_remote_cache_force_write xpu.compile_opt_level
xpu.cutlass_backend_min_gemm_size xpu.cutlass_dir xpu.cutlass_dynamic_cluster_fallback
xpu.cutlass_dynamic_cluster_shape xpu.cutlass_enabled_ops xpu.cutlass_epilogue_fusion_enabled
xpu.cutlass_hash_with_compile_cmd xpu.cutlass_instantiation_level xpu.cutlass_max_profiling_configs
xpu.cutlass_max_profiling_swizzle_options xpu.cutlass_op_allowlist_regex xpu.cutlass_op_denylist_regex
xpu.cutlass_prescreening xpu.cutlass_tma_only xpu.enable_caching_codegen xpu.enable_debug_info
xpu.generate_test_runner xpu.oneapi_root xpu.upload_to_binary_remote_cache xpu.use_binary_remote_cache
xpu.use_fast_math xpu.version xpu_backend
""".split())


class _Namespace(types.SimpleNamespace):
    """A nested group of flags (``config.triton``): its known sub-names read as None until set."""

    def __init__(self, prefix):
        super().__init__()
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name):
        full = f"{self._prefix}.{name}"
        if any(k.startswith(full + ".") for k in OPTION_NAMES):
            value = _Namespace(full)
            object.__setattr__(self, name, value)
            return value
        if full in OPTION_NAMES:
            return None
        raise AttributeError(f"torch._inductor.config has no option {full!r}")


def __getattr__(name):
    if any(k.startswith(name + ".") for k in OPTION_NAMES):
        value = _Namespace(name)
        setattr(sys.modules[__name__], name, value)
        return value
    if name in OPTION_NAMES:
        return None
    raise AttributeError(f"module 'jitorch._inductor.config' has no attribute {name!r}")


def patch(arg1=None, arg2=None, **changes):
    """Set flags for a block or a decorated call, as torch's ``config.patch``: ``patch("triton.cudagraphs", True)``,
    ``patch({"name": value})`` or ``patch(name=value)`` (one form a call, torch's AssertionError otherwise). Dotted
    keys reach the nested namespaces; on exit every flag is back to exactly its previous value, unset ones unset
    again. An unknown key raises torch's AttributeError.

    >>> from jitorch._inductor import config
    >>> with config.patch({"cpp.threads": 4, "max_autotune": True}):
    ...     config.cpp.threads, config.max_autotune
    (4, True)
    >>> config.cpp.threads, config.max_autotune
    (None, None)
    """
    # torch's argument checks, message for message: a key with no value is refused rather than set to None
    if arg1 is not None:
        if arg2 is not None:
            if not isinstance(arg1, str):
                raise AssertionError("first argument must be a string when passing 2 positional args to patch")
            new = {arg1: arg2}
        else:
            if not isinstance(arg1, dict):
                raise AssertionError("first argument must be a dict when passing a single positional arg to patch")
            new = arg1
        if changes:
            raise AssertionError("cannot pass both positional and keyword arguments to patch")
    else:
        if arg2 is not None:
            raise AssertionError("second positional argument is only valid when first argument is a key string")
        new = changes
    return AttrPatch([(*_owner(key), value) for key, value in new.items()])


def _owner(key):
    """The object holding option ``key`` and its last name: the module, or a nested namespace for a dotted key."""
    if key not in OPTION_NAMES:
        raise AttributeError(f"{__name__}.{key} does not exist")
    owner = sys.modules[__name__]
    *path, name = key.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name
