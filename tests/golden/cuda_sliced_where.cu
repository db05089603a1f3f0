// jitorch elementwise kernel, 32-bit indices; launch: blockDim.x % 32 == 0, any gridDim.x
// kernel (4, 3, 2) reduce=0
//   buf0 f32 strides=(6, 2, 1) offset=0
//   buf1 f32 strides=(6, 2, 1) offset=0
//   buf2 f32 strides=(70, -10, 2) offset=66
//   buf3 f32 strides=(6, 2, 1) offset=0
//   %0 = load buf0
//   %1 = load buf1
//   %2 = lt %0 %1
//   %3 = load buf2
//   %4 = neg %3
//   %5 = sub %0 %1
//   %6 = where %2 %4 %5
//   store buf3 %6
extern "C" __global__ void cuda_sliced_where(
    const float* __restrict__ buf0,
    const float* __restrict__ buf1,
    const float* __restrict__ buf2,
    float* __restrict__ buf3) {
    const unsigned int stride = (unsigned int)blockDim.x * gridDim.x;
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 24u; i += stride) {
        const unsigned int q2 = i / 2u;
        const unsigned int i2 = i - q2 * 2u;
        const unsigned int q1 = q2 / 3u;
        const unsigned int i1 = q2 - q1 * 3u;
        const unsigned int o0 = q1 * 6u + i1 * 2u + i2;
        const unsigned int o1 = q1 * 6u + i1 * 2u + i2;
        const unsigned int o2 = 66u + q1 * 70u - i1 * 10u + i2 * 2u;
        const unsigned int o3 = q1 * 6u + i1 * 2u + i2;
        const float v0 = buf0[o0];
        const float v1 = buf1[o1];
        const bool v2 = (v0 < v1);
        const float v3 = buf2[o2];
        const float v4 = (-v3);
        const float v5 = (v0 - v1);
        const float v6 = (v2 ? v4 : v5);
        buf3[o3] = v6;
    }
}
