# ruff: noqa: E501 - the mma emulation below is C++ kept in a string
"""Host emulation of the CUDA subset our templates use, for CPU tests that check a kernel's numbers: one
fiber per CUDA thread (all on one OS thread, each run until it waits), blocks one after another, ``__syncthreads``
a ``host_barrier``; a wait that no thread can end stops the emulation as a hang."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

HEADER = r"""// Host emulation of the CUDA subset the skinny template uses: one fiber per CUDA thread,
// blocks run one after another, __syncthreads is a host_barrier. Shared by the skinny and conv emulations.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>
#include <climits>
#include <sys/mman.h>
#include <type_traits>
#include <ucontext.h>
// The CUDA threads of a launch are fibers on one OS thread, run in turn: each runs until it waits (a barrier, an
// mbarrier, __nanosleep), then the next one runs. OS threads made every __syncthreads hundreds of futex sleeps and
// wakes, which were most of an emulation's CPU time. A wait that no thread can end (a hang on a GPU) stops the run.
// "Thread-local" state is a HOST_FIBER_LOCAL: one global whose bytes are swapped in and out with its fiber (the
// values are scalars and std::vectors, which move as their bytes; plain bytes keep each build's compile short).
struct HostFiberVar { unsigned char* live; size_t size, offset; void (*destroy)(void*); };
struct HostFibers {
  std::vector<HostFiberVar> vars;
  std::vector<unsigned char> init, saved;  // every variable's first bytes; per slot (fiber, then main) its bytes
  size_t bytes = 0;
  std::vector<ucontext_t*> ctx;
  std::vector<char> done;
  std::vector<char*> stacks;  // kept for the next launch: 1 MiB each above a guard page
  ucontext_t main_ctx;
  void (*body)(void*, int) = nullptr;
  void* arg = nullptr;
  int n = 0, cur = -1, live = 0;
  long idle = 0;  // waits since a wait last ended: a full round of them with no end is a deadlock
} g_fibers;
inline int host_fiber_register(void* p, size_t size, void (*destroy)(void*)) {
  const size_t offset = (g_fibers.bytes + 15) / 16 * 16;
  g_fibers.vars.push_back({(unsigned char*)p, size, offset, destroy});
  g_fibers.init.resize(offset + size);
  std::memcpy(g_fibers.init.data() + offset, p, size);
  g_fibers.bytes = offset + size;
  return 0;
}
template <class T> void host_destroy(void* p) { static_cast<T*>(p)->~T(); }
#define HOST_FIBER_LOCAL(type, name, ...) \
  type name{__VA_ARGS__}; const int name##_slot = host_fiber_register(&name, sizeof(type), host_destroy<type>)
constexpr size_t HOST_FIBER_STACK = 1 << 20;
inline unsigned char* host_fiber_slot(int slot) {  // 16-byte aligned, as the variables' own offsets
  unsigned char* base = g_fibers.saved.data();
  return base + (16 - (uintptr_t)base % 16) % 16 + (size_t)slot * g_fibers.bytes;
}
inline void host_fiber_switch(int to) {  // from the running fiber (or main, -1) to fiber `to` (or main)
  const int from = g_fibers.cur;
  unsigned char* out = host_fiber_slot(from < 0 ? g_fibers.n : from);
  unsigned char* in = host_fiber_slot(to < 0 ? g_fibers.n : to);
  for (const HostFiberVar& v : g_fibers.vars) std::memcpy(out + v.offset, v.live, v.size);
  for (const HostFiberVar& v : g_fibers.vars) std::memcpy(v.live, in + v.offset, v.size);
  g_fibers.cur = to;
  swapcontext(from < 0 ? &g_fibers.main_ctx : g_fibers.ctx[from], to < 0 ? &g_fibers.main_ctx : g_fibers.ctx[to]);
}
inline int host_fiber_next() {  // the next unfinished fiber after the running one, or -1
  for (int i = 1; i <= g_fibers.n; ++i) {
    const int f = (g_fibers.cur + i) % g_fibers.n;
    if (!g_fibers.done[f]) return f;
  }
  return -1;
}
inline void host_fiber_entry() {
  g_fibers.body(g_fibers.arg, g_fibers.cur);
  g_fibers.done[g_fibers.cur] = 1; --g_fibers.live; g_fibers.idle = 0;
  host_fiber_switch(host_fiber_next());  // never comes back
}
// Run body(t) for t = 0 .. n - 1, each t a CUDA thread, and return when all have returned.
template <class F> void host_launch(int n, F&& body) {
  while ((int)g_fibers.stacks.size() < n) {
    char* s = (char*)mmap(nullptr, HOST_FIBER_STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED || mprotect(s, 4096, PROT_NONE)) { perror("host_launch: fiber stack"); exit(6); }
    g_fibers.stacks.push_back(s + 4096);
  }
  while ((int)g_fibers.ctx.size() < n) g_fibers.ctx.push_back(new ucontext_t);
  for (int t = 0; t < n; ++t) {
    ucontext_t* c = g_fibers.ctx[t];
    getcontext(c);
    c->uc_stack.ss_sp = g_fibers.stacks[t]; c->uc_stack.ss_size = HOST_FIBER_STACK; c->uc_link = nullptr;
    makecontext(c, host_fiber_entry, 0);
  }
  g_fibers.bytes = (g_fibers.bytes + 15) / 16 * 16;
  g_fibers.init.resize(g_fibers.bytes);
  g_fibers.saved.resize((n + 1) * g_fibers.bytes + 16);  // slot n: main's values, back after the launch
  for (int t = 0; t < n; ++t) std::memcpy(host_fiber_slot(t), g_fibers.init.data(), g_fibers.bytes);
  g_fibers.done.assign(n, 0); g_fibers.n = n; g_fibers.live = n; g_fibers.idle = 0;
  g_fibers.arg = (void*)&body;
  g_fibers.body = [](void* f, int t) { (*(std::remove_reference_t<F>*)f)(t); };
  if (n > 0) host_fiber_switch(0);
  for (int t = 0; t < n; ++t)  // each fiber's last values (what its vectors hold) go as a thread's would
    for (const HostFiberVar& v : g_fibers.vars) v.destroy(host_fiber_slot(t) + v.offset);
  g_fibers.n = 0; g_fibers.body = nullptr;
}
// In a wait's loop: let the other fibers run; false when every unfinished fiber has waited twice since a wait last
// ended (none can end one: a hang on a GPU).
inline bool host_yield() {
  if (g_fibers.cur < 0) return true;  // main, outside a launch: nothing else runs
  if (++g_fibers.idle > 2 * g_fibers.live + 2) return false;
  const int next = host_fiber_next();
  if (next != g_fibers.cur) host_fiber_switch(next);
  return true;
}
inline void host_progress() { g_fibers.idle = 0; }  // a wait ended, or something a wait may watch changed
[[noreturn]] inline void host_hang(const char* what) {
  fprintf(stderr, "%s: every emulated thread waits and none can go on (a hang on a GPU)\n", what); abort();
}
// std::barrier's shape for the fibers: arrive, then wait for the phase to end.
class host_barrier {
 public:
  using arrival_token = unsigned;
  explicit host_barrier(long expected) : expected_(expected) {}
  arrival_token arrive() {
    const unsigned phase = phase_;
    if (++count_ == expected_) { count_ = 0; ++phase_; host_progress(); }
    return phase;
  }
  void wait(arrival_token phase) const {
    while (phase_ == phase) if (!host_yield()) host_hang("a barrier");
    host_progress();
  }
  void arrive_and_wait() { wait(arrive()); }
 private:
  unsigned phase_ = 0;
  long count_ = 0;
  const long expected_;
};
struct dim3 { unsigned x = 0, y = 0, z = 0; };
HOST_FIBER_LOCAL(dim3, threadIdx);
dim3 blockIdx, gridDim, blockDim;
host_barrier* g_bar;
float* g_smem;
unsigned g_smem_bytes;  // dynamic shared memory given to the launch
inline void __syncthreads() { g_bar->arrive_and_wait(); }
// bar.sync g + 1, N: named barrier g of a block's N-thread group; one host_barrier per group, made on first use.
template <int N> inline void host_sync_group(int g) {
  static host_barrier* bars = [] {
    auto* b = static_cast<host_barrier*>(::operator new(64 * sizeof(host_barrier)));
    for (int i = 0; i < 64; ++i) new (b + i) host_barrier(N);
    return b;
  }();
  bars[g].arrive_and_wait();
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) { if (!host_yield()) host_hang("a __nanosleep loop"); }
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
inline unsigned atomicAdd(unsigned* p, unsigned v) { host_progress(); return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* p, unsigned v) { host_progress(); return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
// The emulation mains' input files: the bytes of path, or exit 2 (missing) or 3 (short read).
inline std::vector<char> slurp(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb"); std::vector<char> v; if (!f) { perror(path.c_str()); exit(2); }
  fseek(f, 0, SEEK_END); v.resize(ftell(f)); fseek(f, 0, SEEK_SET); if (fread(v.data(), 1, v.size(), f) != v.size()) exit(3); fclose(f); return v;
}
// cp.async: each copy is held back until its thread waits for its group (cp.async.wait_group N lands all but the
// newest N committed groups), the latest a GPU may land it, so a missing wait reads stale shared memory here too.
// MMA_PTX's cp_async16/cp_async4 and the winograd template's copy helpers (tests/emulation/test_conv.py) queue copies here.
struct PendingCopy { unsigned char* dst; unsigned char bytes[16]; int size = 16; };
HOST_FIBER_LOCAL(std::vector<PendingCopy>, t_open);                 // copies since the last commit
HOST_FIBER_LOCAL(std::vector<std::vector<PendingCopy>>, t_groups);  // committed, not yet landed
inline void host_cp_commit() { t_groups.push_back(t_open); t_open.clear(); }
inline void host_cp_wait(int pending) {
  while ((int)t_groups.size() > pending) {
    for (const PendingCopy& c : t_groups.front()) std::memcpy(c.dst, c.bytes, c.size);
    t_groups.erase(t_groups.begin());
  }
}
inline void host_cp_async(float* dst, float v) {  // one float, its value read now
  PendingCopy c; c.dst = (unsigned char*)dst; c.size = 4; std::memcpy(c.bytes, &v, 4); t_open.push_back(c);
}
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


# The main of the split-K GEMM emulations (skinny, skinny_tc): reads a.bin, b.bin (B shifted by b_offset elements
# from 128-byte alignment) and c.bin, runs the grid `reps` times on the same NaN-poisoned partials and counters
# (the counters must be back at zero after each launch, and every launch must write the same bytes of C although
# a different slice of K runs last each time: the last, the first, the middle one; launches that would repeat an
# order are skipped, but a second launch always runs when asked), writes out.bin. The kernel is KERNEL, its element
# type T; with MMA_PTX included each warp also gets its barrier.
# The arguments and inputs of both GEMM mains (SPLIT_K_GEMM_MAIN, CLUSTER_MAIN): the problem, the launch, the operands.
GEMM_MAIN_HEAD = r"""// argv: dir M N K alpha beta gx gy gz threads smem_bytes b_offset reps
#ifndef KERNEL_EXTRA_ARGS  // arguments after counters (skinny_wgmma: B's tensor map), with a leading comma
#define KERNEL_EXTRA_ARGS
#endif
int main(int argc, char** argv) {
  std::string dir = argv[1];
  int M = atoi(argv[2]), N = atoi(argv[3]), K = atoi(argv[4]);
  float alpha = atof(argv[5]), beta = atof(argv[6]);
  gridDim = {(unsigned)atoi(argv[7]), (unsigned)atoi(argv[8]), (unsigned)atoi(argv[9])};
  int threads = atoi(argv[10]); size_t smem_bytes = atol(argv[11]); int boff = atoi(argv[12]); int reps = atoi(argv[13]);
  blockDim = {(unsigned)threads, 1, 1};
  auto a = slurp((dir + "/a.bin").c_str()); auto b = slurp((dir + "/b.bin").c_str()); auto c0 = slurp((dir + "/c.bin").c_str());
  std::vector<char> bbig(b.size() + 256);  // 128-aligned, then shifted by boff elements
  char* bptr = bbig.data() + (128 - ((uintptr_t)bbig.data() % 128)) % 128 + boff * sizeof(T);
  std::memcpy(bptr, b.data(), b.size());
"""
SPLIT_K_GEMM_MAIN = (
    GEMM_MAIN_HEAD
    + r"""  std::vector<unsigned char> smem(smem_bytes + 128);
  unsigned char* smem_base = smem.data() + (128 - (uintptr_t)smem.data() % 128) % 128;
  g_smem = (float*)smem_base;
#ifdef AUTOTUNE_HOST_EMULATION  // the mma emulation checks shared addresses and meets each warp at a barrier
  g_smem_base = smem_base;
  g_smem_size = smem_bytes;
#endif
  size_t nscratch = (size_t)gridDim.z * M * N + 4;
  std::vector<float> pbig(nscratch, NAN);  // unwritten partials would poison C
  float* partial = pbig.data() + (4 - ((uintptr_t)pbig.data() / 4) % 4) % 4;
  std::vector<unsigned> counters(2 * gridDim.x * gridDim.y, 0u);  // skinny_wgmma counts twice a tile
  std::vector<char> c, first;
  // A launch past the distinct orders would repeat one (with 1 or 2 slices the middle one is the first or the
  // last), so at most that many launches, but two whenever two are asked: the relaunch on the used counters.
  const int orders = gridDim.z < 3 ? (int)gridDim.z : 3;
  const int launches = std::min(reps, std::max(2, orders));
  for (int rep = 0; rep < launches; ++rep) {
    c = c0;
    // Launch r runs slice last_z of K last (so it is the one to sum the split-K partials): the last slice, the
    // first, then the middle one, in turn; the others in order before it.
    const unsigned last_z = rep % 3 == 0 ? gridDim.z - 1 : rep % 3 == 1 ? 0 : gridDim.z / 2;
    for (unsigned zi = 0; zi < gridDim.z; ++zi)
      for (unsigned y = 0; y < gridDim.y; ++y)
        for (unsigned x = 0; x < gridDim.x; ++x) {
          const unsigned z = zi < last_z ? zi : zi + 1 < gridDim.z ? zi + 1 : last_z;
          blockIdx = {x, y, z};
          host_barrier bar(threads);
          g_bar = &bar;
#ifdef AUTOTUNE_HOST_EMULATION
          const auto warp_bars = host_warp_barriers(threads);
#endif
          std::fill(smem.begin(), smem.end(), (unsigned char)0xff);  // NaN: stale shared memory must never matter
          host_launch(threads, [&](int t) {
            threadIdx = {(unsigned)t, 0, 0};
            KERNEL((const T*)a.data(), (const T*)bptr, (T*)c.data(), M, N, K, alpha, beta, partial, counters.data() KERNEL_EXTRA_ARGS);
          });
        }
    for (unsigned v : counters) if (v) { fprintf(stderr, "counter not reset: %u\n", v); return 4; }
    if (rep == 0) first = c;
    else if (c != first) {  // the sums are in z order, so the blocks' order must not change a bit of C
      fprintf(stderr, "launch %d (slice %u last) wrote a different C from launch 0\n", rep, last_z); return 5;
    }
  }
  FILE* f = fopen((dir + "/out.bin").c_str(), "wb"); fwrite(c.data(), 1, c.size(), f); fclose(f);
  return 0;
}
"""
)

# Lane-exact emulations of the PTX wrappers of the mma templates (templates/gemm/mma.cu.j2,
# templates/conv/implicit_mma.cu.j2): mma.sync m16n8k16, ldmatrix (.trans) and cp.async. Every lane publishes
# its operands to its warp, the warp meets at a barrier, and each lane takes what the PTX ISA's fragment layouts
# give it. cp.async copies land only when cp.async.wait_group lets them (the latest the hardware may), so a
# missing wait reads stale shared memory; ldmatrix checks alignment and counts bank conflicts. The launcher must
# set g_smem_base, g_smem_size and one g_warp_bar per warp.
MMA_PTX = r"""
#define AUTOTUNE_HOST_EMULATION
struct WarpExchange { const unsigned short* rows[32]; unsigned a[32][4]; unsigned b[32][2]; };
host_barrier* g_warp_bar[32];
WarpExchange g_wx[32];
// The mma operands go through two exchanges in turn: the next mma writes the other, and the one after waits at the
// next one's barrier, which every lane reaches only after reading this one; so an mma meets its warp once, not twice.
WarpExchange g_mma_x[2][32];
HOST_FIBER_LOCAL(unsigned, t_mma_turn, 0);
unsigned char* g_smem_base;
size_t g_smem_size;
std::atomic<long> g_conflicts{0}, g_ldmatrix{0};
inline void __syncwarp(unsigned = 0xffffffffu) { g_warp_bar[threadIdx.x / 32]->arrive_and_wait(); }
// One barrier per warp of a block of `threads` threads, installed in g_warp_bar; they live as long as the result
// (a launcher keeps it for the block's run).
inline std::vector<std::unique_ptr<host_barrier>> host_warp_barriers(int threads) {
  std::vector<std::unique_ptr<host_barrier>> bars;
  for (int w = 0; w < threads / 32; ++w) { bars.emplace_back(new host_barrier(32)); g_warp_bar[w] = bars.back().get(); }
  return bars;
}

inline void cp_async16(void* dst, const void* src, bool in_bounds) {
  PendingCopy c; c.dst = (unsigned char*)dst;
  if ((uintptr_t)dst % 16 || c.dst < g_smem_base || c.dst + 16 > g_smem_base + g_smem_size) { fprintf(stderr, "cp.async: bad shared address\n"); abort(); }
  if (in_bounds) { if ((uintptr_t)src % 16) { fprintf(stderr, "cp.async: unaligned global address\n"); abort(); } std::memcpy(c.bytes, src, 16); }
  else std::memset(c.bytes, 0, 16);
  t_open.push_back(c);
}
// cp.async.ca with 4 bytes (src-size 0: zero-filled); lands when cp.async.wait_group lets it, like cp_async16
inline void cp_async4(void* dst, const void* src, bool in_bounds) {
  PendingCopy c; c.dst = (unsigned char*)dst; c.size = 4;
  if ((uintptr_t)dst % 4 || c.dst < g_smem_base || c.dst + 4 > g_smem_base + g_smem_size) { fprintf(stderr, "cp.async: bad shared address\n"); abort(); }
  std::memset(c.bytes, 0, 16);
  if (in_bounds) std::memcpy(c.bytes, src, 4);
  t_open.push_back(c);
}
inline void cp_async_commit() { host_cp_commit(); }
template <int N> inline void cp_async_wait() { host_cp_wait(N); }

inline void ldmatrix_any(unsigned (&r)[4], const void* p, bool trans) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  const unsigned char* q = (const unsigned char*)p;
  if ((uintptr_t)q % 16 || q < g_smem_base || q + 16 > g_smem_base + g_smem_size) { fprintf(stderr, "ldmatrix: bad row address\n"); abort(); }
  g_wx[w].rows[l] = (const unsigned short*)p;
  __syncwarp();
  if (l == 0) {  // each 8x8 matrix is one phase: its eight 16-byte rows should sit in eight bank groups
    long conflicts = 0;
    for (int m = 0; m < 4; ++m) {
      unsigned seen = 0;
      for (int i = 0; i < 8; ++i) {
        const unsigned group = (unsigned)(((const unsigned char*)g_wx[w].rows[8 * m + i] - g_smem_base) / 16 % 8);
        conflicts += (seen >> group) & 1u; seen |= 1u << group;
      }
    }
    g_conflicts += conflicts; g_ldmatrix += 1;
  }
  for (int m = 0; m < 4; ++m) {
    unsigned lo, hi;
    if (!trans) {  // lane l: row l / 4 of matrix m, elements 2 (l % 4) and 2 (l % 4) + 1
      const unsigned short* row = g_wx[w].rows[8 * m + l / 4];
      lo = row[2 * (l % 4)], hi = row[2 * (l % 4) + 1];
    } else {  // the same position of the transposed matrix: column l / 4 of rows 2 (l % 4) and 2 (l % 4) + 1
      lo = g_wx[w].rows[8 * m + 2 * (l % 4)][l / 4], hi = g_wx[w].rows[8 * m + 2 * (l % 4) + 1][l / 4];
    }
    r[m] = lo | (hi << 16);
  }
  __syncwarp();
}
inline void ldmatrix_x4(unsigned (&r)[4], const void* p) { ldmatrix_any(r, p, false); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) { ldmatrix_any(r, p, true); }

inline float bits_to_float(unsigned short h, __half*) { return __half2float(__ushort_as_half(h)); }
inline float bits_to_float(unsigned short h, __nv_bfloat16*) { return __uint_as_float((unsigned)h << 16); }
// d += A (16x16, row) B (16x8, col); groupID g = lane / 4, q = lane % 4 (PTX ISA, mma.m16n8k16 .f16/.bf16):
// a0 (g, 2q..2q+1), a1 (g+8, 2q..), a2 (g, 2q+8..), a3 (g+8, 2q+8..); b0 (k 2q..2q+1, n g), b1 (k 2q+8.., n g);
// c0, c1 (g, 2q..2q+1), c2, c3 (g+8, 2q..2q+1)
template <class X>
inline void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  WarpExchange& x = g_mma_x[t_mma_turn ^= 1u][w];
  for (int i = 0; i < 4; ++i) x.a[l][i] = a[i];
  for (int i = 0; i < 2; ++i) x.b[l][i] = b[i];
  __syncwarp();
  auto half = [](unsigned reg, int k) { return (unsigned short)(k % 2 ? reg >> 16 : reg & 0xffffu); };
  auto A_ = [&](int r, int k) { return bits_to_float(half(x.a[(r % 8) * 4 + (k % 8) / 2][r / 8 + 2 * (k / 8)], k), (X*)nullptr); };
  auto B_ = [&](int k, int n) { return bits_to_float(half(x.b[n * 4 + (k % 8) / 2][k / 8], k), (X*)nullptr); };
  const int g = l / 4, q = l % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * q + e % 2;
    float s = d[e];
    for (int k = 0; k < 16; ++k) s += A_(row, k) * B_(k, col);
    d[e] = s;
  }
}
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
// cvt.rna.tf32.f32: round the 23-bit mantissa to 10 bits, ties away from zero (sign-magnitude: add half an ulp)
inline unsigned host_tf32(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;
  return u & 0xffffe000u;
}
// d += A (16x8, row) B (8x8, col), tf32 (PTX ISA, mma.m16n8k8 .tf32; the low 13 bits of an operand are ignored):
// a0 (g, q), a1 (g+8, q), a2 (g, q+4), a3 (g+8, q+4); b0 (k q, n g), b1 (k q+4, n g); c0, c1 (g, 2q..), c2, c3 (g+8, 2q..)
inline void host_mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  WarpExchange& x = g_mma_x[t_mma_turn ^= 1u][w];  // the exchange in turn, as in mma_m16n8k16
  for (int i = 0; i < 4; ++i) x.a[l][i] = a[i];
  x.b[l][0] = b0; x.b[l][1] = b1;
  __syncwarp();
  auto tf = [](unsigned u) { return __uint_as_float(u & 0xffffe000u); };
  auto A_ = [&](int r, int k) { return tf(x.a[(r % 8) * 4 + k % 4][r / 8 + 2 * (k / 4)]); };
  auto B_ = [&](int k, int n) { return tf(x.b[n * 4 + k % 4][k / 4]); };
  const int g = l / 4, q = l % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * q + e % 2;
    float s = d[e];
    for (int k = 0; k < 8; ++k) s += A_(row, k) * B_(k, col);
    d[e] = s;
  }
}
"""


def run_split_k_gemm(tmp_path, header: str, body: str, shape, layout: str, alpha: float, beta: float, launch,
                     b_offset: int, reps: int) -> float:  # fmt: skip
    """Build an emulation (``header``: the shims; ``body``: the kernel and one of the GEMM mains, T = float) with
    g++, run it `reps` times on random normal A, B and C of ``shape`` (A stored transposed for layout "T."), B
    shifted by ``b_offset`` floats from 128-byte alignment; the relative Frobenius error of C against float64."""
    import numpy as np

    build(tmp_path, header, body)
    M, N, K = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = rng.standard_normal((M, N)).astype(np.float32)
    np.ascontiguousarray(a.T if layout[0] == "T" else a).tofile(tmp_path / "a.bin")
    b.tofile(tmp_path / "b.bin")
    c.tofile(tmp_path / "c.bin")
    args = [tmp_path / "k", tmp_path, M, N, K, alpha, beta, *launch.grid, launch.block[0], launch.shared_bytes]
    run = subprocess.run([str(x) for x in [*args, b_offset, reps]], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    out = np.fromfile(tmp_path / "out.bin", np.float32).reshape(M, N).astype(np.float64)
    ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c.astype(np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


@functools.cache
def gxx() -> str | None:
    gxx = shutil.which("g++")
    if not gxx:
        return None
    probe = subprocess.run(
        [gxx, "-std=c++17", "-x", "c++", "-fsyntax-only", "-"],
        input="#include <ucontext.h>\nint main() { _Float16 h = 1.0f; return (int)(float)h - 1; }\n",
        capture_output=True,
        text=True,
    )
    return gxx if probe.returncode == 0 else None


# -Og: the emulations compile in ~25% less time than at -O1 (most of a test is the build) and run about as fast;
# -O0 builds as fast but runs the fibers slower, -O2 builds slower.
FLAGS = ("-std=c++17", "-Og", "-pthread", "-fno-strict-aliasing", "-w")
# tests/conftest.py names a folder of the test session here; without it every build compiles from scratch.
BUILD_CACHE_ENV = "AUTOTUNE_TEST_BUILD_CACHE"


def build(tmp_path, header: str, body: str, flags: tuple[str, ...] = FLAGS) -> Path:
    """Compile an emulation with g++: ``header`` (the CUDA shims, written to emu.h and included first), then
    ``body`` (the host-adapted kernel and a main); the executable is tmp_path/k.

    In a test session the same sources and flags are compiled once: a kernel's source does not depend on the
    problem, and tests run one kernel on several shapes (the shapes and inputs are the executable's arguments and
    files, so every run still happens). The header is precompiled once per text; a precompiled header that g++
    cannot use is ignored and emu.h is read instead, so the cache changes only the time, never the build."""
    compiler = gxx()
    assert compiler, "build() needs g++ with C++17 and _Float16 (see gxx())"
    (tmp_path / "emu.h").write_text(header)
    (tmp_path / "k.cpp").write_text(f'#include "emu.h"\n{body}')
    exe = tmp_path / "k"
    cmd = [compiler, *flags, "-o", str(exe), str(tmp_path / "k.cpp")]
    cache = os.environ.get(BUILD_CACHE_ENV)
    if not cache:
        subprocess.run(cmd, check=True)
        return exe
    folder = Path(cache) / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / _digest(compiler, *flags, header, body)
    with _locked(kept.with_suffix(".lock")):  # another xdist worker may be building the same executable
        if kept.exists():  # (over an executable an earlier build in this folder left)
            shutil.copy2(kept, exe)
            return exe
        pch_flags = tuple(f for f in flags if not f.startswith("-D"))  # -D macros of the mains, not the header
        gch = tmp_path / "emu.h.gch"
        gch.unlink(missing_ok=True)
        gch.symlink_to(_precompiled(Path(cache), compiler, header, pch_flags))
        subprocess.run(cmd, check=True)
        shutil.copy2(exe, kept.with_suffix(".tmp"))
        os.replace(kept.with_suffix(".tmp"), kept)
    return exe


def _precompiled(cache: Path, compiler: str, header: str, flags: tuple[str, ...]) -> Path:
    """The precompiled ``header`` (emu.h.gch) for these flags, built on first use."""
    folder = cache / "pch" / _digest(compiler, *flags, header)
    folder.mkdir(parents=True, exist_ok=True)
    gch = folder / "emu.h.gch"
    with _locked(folder / "lock"):
        if not gch.exists():
            (folder / "emu.h").write_text(header)
            tmp = folder / "emu.h.gch.tmp"
            subprocess.run([compiler, *flags, "-x", "c++-header", "-o", str(tmp), str(folder / "emu.h")], check=True)
            os.replace(tmp, gch)
    return gch


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


# Lane-exact emulation of the sm_90a wgmma wrappers of templates/gemm/skinny_wgmma.cu.j2 (wgmma.mma_async m64nNk8
# tf32, A from registers, B through a K-major no-swizzle shared-memory descriptor; PTX ISA, "Asynchronous
# Warpgroup Level Matrix Multiply-Accumulate"). A wgmma runs when a wgmma.wait_group retires its group, the latest
# the hardware may: it reads its A registers and shared memory then, and writes D then, so rewriting a fragment,
# a split buffer or reading D before the wait shows up in the numbers. Include after MMA_PTX.
WGMMA_PTX = r"""
struct HostWgmmaOp { float* d; int nd; const unsigned* a; unsigned long long desc; int accumulate; };
HOST_FIBER_LOCAL(std::vector<HostWgmmaOp>, t_wg_open);
HOST_FIBER_LOCAL(std::vector<std::vector<HostWgmmaOp>>, t_wg_groups);
// A block's shared memory and its slot among the blocks that run at once (CLUSTER_MAIN runs a cluster's blocks
// together; the other mains one block, slot 0, at g_smem_base).
HOST_FIBER_LOCAL(unsigned char*, t_smem_base, nullptr);
HOST_FIBER_LOCAL(size_t, t_smem_size, 0);
HOST_FIBER_LOCAL(int, t_block_slot, 0);
inline unsigned char* host_smem_base() { return t_smem_base ? t_smem_base : g_smem_base; }
inline size_t host_smem_size() { return t_smem_base ? t_smem_size : g_smem_size; }
unsigned g_wg_a[8 * 8][128][4];  // each warpgroup's A registers, published for the group's threads
inline unsigned smem_u32(const void* p) {
  const unsigned char* q = (const unsigned char*)p;
  if (q < host_smem_base() || q > host_smem_base() + host_smem_size()) { fprintf(stderr, "smem_u32: not shared memory\n"); abort(); }
  return (unsigned)(q - host_smem_base());
}
inline void fence_proxy_async() {}
inline void wgmma_fence() {}
inline void host_wgmma_tf32(float* d, int nd, const unsigned (&a)[4], unsigned long long desc, int accumulate) {
  t_wg_open.push_back({d, nd, a, desc, accumulate});
}
inline void wgmma_commit() { t_wg_groups.push_back(t_wg_open); t_wg_open.clear(); }
// d (64 x N) = A (64 x 8: warp w rows 16w.., mma.m16n8k8 tf32 layout) B (8 x N from the descriptor) [+ d];
// thread (w, g = lane / 4, t = lane % 4) holds row 16w + g + 8r, column 8j + 2t + e in d[4j + 2r + e].
inline void host_wgmma_run(const HostWgmmaOp& op) {
  const int wg = t_block_slot * 8 + threadIdx.x / 128, r = threadIdx.x % 128;
  for (int i = 0; i < 4; ++i) g_wg_a[wg][r][i] = op.a[i];
  host_sync_group<128>(wg);
  if ((op.desc >> 62) != 0 || ((op.desc >> 49) & 7u) != 0) { fprintf(stderr, "wgmma: swizzle or base offset set\n"); abort(); }
  const size_t start = (op.desc & 0x3fffu) << 4, lbo = ((op.desc >> 16) & 0x3fffu) << 4, sbo = ((op.desc >> 32) & 0x3fffu) << 4;
  auto tf = [](unsigned u) { return __uint_as_float(u & 0xffffe000u); };
  auto A_ = [&](int row, int k) { const int w = row / 16, q = row % 16; return tf(g_wg_a[wg][32 * w + (q % 8) * 4 + k % 4][q / 8 + 2 * (k / 4)]); };
  auto B_ = [&](int k, int col) {  // core matrix (k / 4, col / 8): 8 rows of 16 bytes
    const size_t off = start + (k / 4) * lbo + (col / 8) * sbo + (col % 8) * 16 + (k % 4) * 4;
    if (off % 4 || off + 4 > host_smem_size()) { fprintf(stderr, "wgmma: descriptor reads outside shared memory\n"); abort(); }
    unsigned u; std::memcpy(&u, host_smem_base() + off, 4); return tf(u);
  };
  const int w = r / 32, g = (r % 32) / 4, t = r % 4;
  std::vector<float> out(op.nd);
  for (int i = 0; i < op.nd; ++i) {
    const int row = 16 * w + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * t + i % 2;
    float s = 0.0f;
    for (int k = 0; k < 8; ++k) s += A_(row, k) * B_(k, col);
    out[i] = (op.accumulate ? op.d[i] : 0.0f) + s;
  }
  host_sync_group<128>(wg);  // every thread has read the published registers before they are replaced
  for (int i = 0; i < op.nd; ++i) op.d[i] = out[i];
}
template <int N> inline void wgmma_wait() {
  while ((int)t_wg_groups.size() > N) {
    for (const HostWgmmaOp& op : t_wg_groups.front()) host_wgmma_run(op);
    t_wg_groups.erase(t_wg_groups.begin());
  }
}
"""


# The main of a cluster-launched split-K GEMM emulation (skinny_wgmma with CLUSTER): the SPLIT_K blocks of a tile run
# at once, as one cluster (threads know their block by t_blockIdx, their shared memory by t_smem_base, their block
# barrier by t_bar); barrier.cluster is a host_barrier of the cluster's threads, mapa/st.shared::cluster address
# the other blocks' shared memory. Include after WGMMA_PTX and define KERNEL and T. Same argv as SPLIT_K_GEMM_MAIN.
CLUSTER_PRELUDE = r"""
HOST_FIBER_LOCAL(dim3, t_blockIdx);
HOST_FIBER_LOCAL(host_barrier*, t_bar);
#define blockIdx t_blockIdx
inline void host_block_sync() { t_bar->arrive_and_wait(); }
#define __syncthreads host_block_sync
unsigned char* g_cluster_arena;
size_t g_cluster_stride;
host_barrier* g_cluster_bar;
HOST_FIBER_LOCAL(std::optional<host_barrier::arrival_token>, t_cluster_token);
inline float* host_block_smem() { return (float*)t_smem_base; }
inline void cluster_arrive_relaxed() { t_cluster_token.emplace(g_cluster_bar->arrive()); }
inline void cluster_arrive_release() { t_cluster_token.emplace(g_cluster_bar->arrive()); }
inline void cluster_wait() { g_cluster_bar->wait(std::move(*t_cluster_token)); t_cluster_token.reset(); }
inline unsigned cluster_map(unsigned addr, unsigned rank) { return addr | ((rank + 1u) << 24); }
inline void st_cluster_v2(unsigned addr, float a, float b) {
  const unsigned rank = (addr >> 24) - 1u, off = addr & 0xffffffu;
  if (addr >> 24 == 0 || off + 8 > g_cluster_stride) { fprintf(stderr, "st.shared::cluster: bad address\n"); abort(); }
  float v[2] = {a, b};
  std::memcpy(g_cluster_arena + rank * g_cluster_stride + off, v, 8);
}
"""

CLUSTER_MAIN = (
    GEMM_MAIN_HEAD
    + r"""  const int blocks = gridDim.z;  // one cluster: the tile's SPLIT_K blocks
  const size_t stride = (smem_bytes + 127) / 128 * 128;
  std::vector<unsigned char> arena(stride * blocks + 128);
  unsigned char* base = arena.data() + (128 - (uintptr_t)arena.data() % 128) % 128;
  g_cluster_arena = base; g_cluster_stride = stride;
  g_smem_base = base; g_smem_size = stride * blocks;  // cp.async's checks: anywhere in the cluster's memory
  std::vector<char> c;
  for (int rep = 0; rep < reps; ++rep) {
    c = c0;
    for (unsigned y = 0; y < gridDim.y; ++y)
      for (unsigned x = 0; x < gridDim.x; ++x) {
        std::fill(arena.begin(), arena.end(), (unsigned char)0xff);  // NaN: stale shared memory must never matter
        host_barrier cluster_bar(threads * blocks);
        g_cluster_bar = &cluster_bar;
        std::vector<std::unique_ptr<host_barrier>> block_bars;
        for (int q = 0; q < blocks; ++q) block_bars.emplace_back(new host_barrier(threads));
        host_launch(blocks * threads, [&](int i) {  // block q's threads are fibers q * threads ..
          const int q = i / threads, t = i % threads;
          threadIdx = {(unsigned)t, 0, 0};
          t_blockIdx = {x, y, (unsigned)q};
          t_smem_base = base + q * stride; t_smem_size = smem_bytes; t_block_slot = q;
          t_bar = block_bars[q].get();
          KERNEL((const T*)a.data(), (const T*)bptr, (T*)c.data(), M, N, K, alpha, beta, nullptr, nullptr KERNEL_EXTRA_ARGS);
        });
      }
  }
  FILE* f = fopen((dir + "/out.bin").c_str(), "wb"); fwrite(c.data(), 1, c.size(), f); fclose(f);
  return 0;
}
"""
)


# Emulation of the tensor memory accelerator and the mbarriers of templates/gemm/skinny_wgmma.cu.j2 (TMA = true):
# a "tensor map" is the host's own struct (the real one is the driver's opaque bytes); a box lands only when a
# thread waits on its barrier's phase (the latest the hardware may), element by element at the shared address
# the map's swizzle gives (16-byte piece p of each 128 (64) bytes at p ^ (address bits 7..9 (7..8))), zeros past
# the tensor's edges. A wait on a phase nothing will complete (it would hang) or a byte count that disagrees with
# the boxes aborts. Include after WGMMA_PTX; KERNEL_EXTRA_ARGS passes the maps (host_tensor_map).
TMA_PTX = r"""
#include <map>
#define __grid_constant__
struct TensorMap { const float* base; long long width, height, ld; int box_w, box_h, swizzle; };  // swizzle: bytes
inline TensorMap host_tensor_map(const void* p, int width, int height, int box_w, int box_h, int swizzle) {
  return {(const float*)p, width, height, width, box_w, box_h, swizzle};
}
struct HostMbar {
  struct Box { unsigned char* dst; TensorMap map; int x, y; };
  int phase = 0;
  bool armed = false;
  long long expect = 0;
  std::vector<Box> boxes;
};
std::map<const void*, HostMbar> g_mbars;
inline HostMbar& host_mbar(const void* bar) {
  auto it = g_mbars.find(bar);
  if (it == g_mbars.end()) { fprintf(stderr, "mbarrier: used before mbarrier.init\n"); abort(); }
  return it->second;
}
inline void mbar_init(unsigned long long* bar) { g_mbars[bar] = HostMbar{}; host_progress(); }
inline void mbar_fence_init() {}
inline void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
  HostMbar& b = host_mbar(bar);
  if (b.armed) { fprintf(stderr, "mbarrier: a second arrival in one phase (count 1)\n"); abort(); }
  b.armed = true;
  b.expect += bytes;
  host_progress();
}
inline void tma_load_2d(void* dst, const TensorMap* map, int x, int y, unsigned long long* bar) {
  const unsigned char* q = (const unsigned char*)dst;
  if ((uintptr_t)(q - host_smem_base()) % 128 || q < host_smem_base() ||
      q + (size_t)map->box_w * map->box_h * 4 > host_smem_base() + host_smem_size()) {
    fprintf(stderr, "cp.async.bulk.tensor: bad shared address\n"); abort();
  }
  if (map->box_w * 4 != map->swizzle || (map->swizzle != 64 && map->swizzle != 128)) {
    fprintf(stderr, "cp.async.bulk.tensor: these maps' rows are one swizzle span (64 or 128 bytes)\n"); abort();
  }
  HostMbar& b = host_mbar(bar);
  b.boxes.push_back({(unsigned char*)dst, *map, x, y});
  long long bytes = 0;
  for (const HostMbar::Box& box : b.boxes) bytes += (long long)box.map.box_w * box.map.box_h * 4;
  if (bytes > b.expect) { fprintf(stderr, "mbarrier: expect_tx of %lld bytes, boxes of %lld\n", b.expect, bytes); abort(); }
  host_progress();
}
inline void mbar_wait(unsigned long long* bar, unsigned parity) {
  // Waits like try_wait's loop until thread 0 has issued the phase's boxes; if no thread can issue them, a GPU hangs.
  auto box_bytes = [](const HostMbar& b) {
    long long bytes = 0;
    for (const HostMbar::Box& box : b.boxes) bytes += (long long)box.map.box_w * box.map.box_h * 4;
    return bytes;
  };
  auto ready = [&] {
    const HostMbar& b = host_mbar(bar);
    return (int)parity != b.phase || (b.armed && box_bytes(b) == b.expect);
  };
  while (!ready()) {
    if (host_yield()) continue;
    const HostMbar& b = host_mbar(bar);
    fprintf(stderr, "mbarrier: waiting on a phase nothing completes (a hang on a GPU): expect_tx of %lld bytes, boxes of %lld\n", b.expect, box_bytes(b));
    abort();
  }
  host_progress();
  HostMbar& b = host_mbar(bar);
  if ((int)parity != b.phase) return;  // that phase has completed
  for (const HostMbar::Box& box : b.boxes) {
    const TensorMap& m = box.map;
    for (int r = 0; r < m.box_h; ++r)
      for (int c = 0; c < m.box_w; ++c) {
        const long long gx = (long long)box.x + c, gy = (long long)box.y + r;
        const float v = gx >= 0 && gy >= 0 && gx < m.width && gy < m.height ? m.base[gy * m.ld + gx] : 0.0f;
        const size_t addr = (size_t)(box.dst - host_smem_base()) + ((size_t)r * m.box_w + c) * 4;
        std::memcpy(host_smem_base() + (addr ^ (((addr >> 7) & (m.swizzle / 16 - 1)) << 4)), &v, 4);
      }
  }
  b.boxes.clear(); b.expect = 0; b.armed = false; b.phase ^= 1;
}
"""
