// jitorch thread reduce kernel, 32-bit indices; launch: blockDim.x % 32 == 0, any gridDim.x
// kernel (5, 9, 7) reduce=2
//   buf0 f64 strides=(7, 35, 1) offset=0
//   buf1 f64 strides=(1, 0, 0) offset=0
//   %0 = load buf0
//   store buf1 max %0
extern "C" __global__ void cuda_small_max_f64(
    const double* __restrict__ buf0,
    double* __restrict__ buf1) {
    const unsigned int stride = (unsigned int)blockDim.x * gridDim.x;
    for (unsigned int p = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; p < 5u; p += stride) {
        const unsigned int po0 = p * 7u;
        const unsigned int po1 = p;
        double acc0 = __longlong_as_double(0xfff0000000000000ULL);
        for (unsigned int r = 0u; r < 63u; r += 1) {
            const unsigned int rq1 = r / 7u;
            const unsigned int ri1 = r - rq1 * 7u;
            const unsigned int ro0 = po0 + rq1 * 35u + ri1;
            const double v0 = buf0[ro0];
            acc0 = ((acc0 != acc0 || acc0 > v0) ? acc0 : v0);
        }
        buf1[po1] = acc0;
    }
}
