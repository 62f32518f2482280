"""Host emulation of the CUDA subset our templates use, for CPU tests that check a kernel's numbers: one
std::thread per CUDA thread, blocks one after another, ``__syncthreads`` a ``std::barrier``."""

from __future__ import annotations

import functools
import shutil
import subprocess

HEADER = r"""// Host emulation of the CUDA subset the skinny template uses: one std::thread per CUDA thread,
// blocks run one after another, __syncthreads is a std::barrier. Shared by the skinny and conv emulations.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
struct dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local dim3 threadIdx;
dim3 blockIdx, gridDim, blockDim;
std::barrier<>* g_bar;
float* g_smem;
unsigned g_smem_bytes;  // dynamic shared memory given to the launch
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }
template <class T> void __stcg(T* p, T v) { *p = v; }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
struct __half { unsigned short x; };
inline float __half2float(__half h) { _Float16 f; std::memcpy(&f, &h.x, 2); return (float)f; }
inline __half __float2half_rn(float v) { _Float16 f = (_Float16)v; __half h; std::memcpy(&h.x, &f, 2); return h; }
inline __half __ushort_as_half(unsigned short u) { __half h; h.x = u; return h; }
struct __nv_bfloat16 { unsigned short x; };
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.x << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  unsigned u; std::memcpy(&u, &v, 4); u += 0x7fffu + ((u >> 16) & 1u);
  __nv_bfloat16 h; h.x = (unsigned short)(u >> 16); return h;
}
"""


@functools.cache
def gxx() -> str | None:
    gxx = shutil.which("g++")
    if not gxx:
        return None
    probe = subprocess.run(
        [gxx, "-std=c++20", "-x", "c++", "-fsyntax-only", "-"],
        input="#include <barrier>\nint main() { _Float16 h = 1.0f; return (int)(float)h - 1; }\n",
        capture_output=True,
        text=True,
    )
    return gxx if probe.returncode == 0 else None
