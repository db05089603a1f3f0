// Block-wide sum of float: warp shuffles, then one shared partial per warp folded by warp 0. The result is
// valid in thread 0; the trailing barrier lets the caller reuse `partials` (32 entries) right away.
static __device__ __forceinline__ float jt_block_sum_f32(float v, float* partials) {
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_down_sync(0xffffffffu, v, offset);
        v = (v + other);
    }
    if (lane == 0u) {
        partials[warp] = v;
    }
    __syncthreads();
    if (warp == 0u) {
        v = lane < (blockDim.x >> 5) ? partials[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float other = __shfl_down_sync(0xffffffffu, v, offset);
            v = (v + other);
        }
    }
    __syncthreads();
    return v;
}

// jitorch block reduce kernel, 32-bit indices; launch: blockDim.x % 32 == 0, any gridDim.x
// kernel (64, 1000) reduce=1
//   buf0 f32 strides=(1000, 1) offset=0
//   buf1 f32 strides=(1, 0) offset=0
//   %0 = load buf0
//   %1 = exp %0
//   store buf1 sum %1
extern "C" __global__ void cuda_row_sum(
    const float* __restrict__ buf0,
    float* __restrict__ buf1) {
    __shared__ float partials0[32];
    for (unsigned int p = (unsigned int)blockIdx.x; p < 64u; p += gridDim.x) {
        const unsigned int po0 = p * 1000u;
        const unsigned int po1 = p;
        float acc0 = 0.0f;
        for (unsigned int r = threadIdx.x; r < 1000u; r += blockDim.x) {
            const unsigned int ro0 = po0 + r;
            const float v0 = buf0[ro0];
            const float v1 = expf(v0);
            acc0 = (acc0 + v1);
        }
        acc0 = jt_block_sum_f32(acc0, partials0);
        if (threadIdx.x == 0u) {
            buf1[po1] = acc0;
        }
    }
}
