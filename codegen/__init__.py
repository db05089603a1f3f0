"""jitorch.codegen: kernel IR, fusion and the LLVM/CUDA backends (built in the fusion issue).

It knows nothing of Tensor or nn: it turns graphs of primitive ops into compiled kernels.
"""
