/* block_reduce.cuh: the block-wide fp32 sum that the per-row norms share
 * (RMSNorm, Qwen's per-head q/k norm): warp shuffles, then one warp over
 * the per-warp partials in shared memory. */
#ifndef MT_BLOCK_REDUCE_CUH
#define MT_BLOCK_REDUCE_CUH

#include <cuda_runtime.h>

/* The sum of every thread's x over the block, returned to all threads.
 * blockDim.x a multiple of 32, <= 1024; every thread of the block calls it. */
__device__ __forceinline__ float block_sum(float x)
{
    __shared__ float red[32]; /* [warps]: one partial per warp, then the total */
    for (int o = 16; o; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = x;
    __syncthreads();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
        for (int o = 16; o; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0)
            red[0] = s;
    }
    __syncthreads();
    return red[0];
}

#endif
