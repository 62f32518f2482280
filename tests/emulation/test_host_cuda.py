"""The host emulator itself (tests/host_cuda.py): CUDA threads as fibers that take turns at their waits."""

from __future__ import annotations

import subprocess

import pytest

from tests.host_cuda import HEADER, build, gxx

# Each thread keeps its own threadIdx and its own cp.async queue across waits; a barrier orders shared memory (every
# thread reads its neighbour's value after the barrier, then writes a new one after a second barrier); the sum of
# what thread t read in both rounds goes out on stdout.
ROUNDS = r"""
__global__ void rounds(int* out) {
  static int s[256];  // __shared__
  const int t = threadIdx.x, n = blockDim.x;
  int seen = 0;
  for (int r = 0; r < 2; ++r) {
    s[t] = 1000 * r + t;
    host_cp_async((float*)&out[n + t], (float)t);  // lands only at this thread's own wait below
    __syncthreads();
    seen += s[(t + 1) % n];
    __syncthreads();
    host_cp_commit(); host_cp_wait(0);
  }
  out[t] = seen + (threadIdx.x != (unsigned)t);  // threadIdx unchanged by the other threads' turns
}
int main(int argc, char** argv) {
  const int n = atoi(argv[1]), early = atoi(argv[2]);
  std::vector<int> out(2 * n, -1);
  host_barrier bar(n); g_bar = &bar; blockDim = {(unsigned)n, 1, 1};
  host_launch(n, [&](int t) {
    threadIdx = {(unsigned)t, 0, 0};
    if (t == early) return;  // a thread that skips the block's barriers: the others wait for ever on a GPU
    rounds(out.data());
  });
  for (int t = 0; t < n; ++t) printf("%d %d\n", out[t], (int)__uint_as_float((unsigned)out[n + t]));
  return 0;
}
"""


def _run(tmp_path, threads: int, early: int) -> subprocess.CompletedProcess:
    if gxx() is None:
        pytest.skip("needs g++ with C++17 and _Float16")
    exe = build(tmp_path, HEADER, ROUNDS)
    return subprocess.run([str(exe), str(threads), str(early)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("threads", [1, 33, 256])
def test_threads_keep_their_own_state_and_barriers_order_shared_memory(tmp_path, threads):
    run = _run(tmp_path, threads, early=-1)
    assert run.returncode == 0, run.stderr
    rows = [tuple(map(int, line.split())) for line in run.stdout.splitlines()]
    expected = [((t + 1) % threads + 1000 + (t + 1) % threads, t) for t in range(threads)]
    assert rows == expected


def test_a_barrier_that_no_thread_can_finish_stops_the_run_as_a_hang(tmp_path):
    run = _run(tmp_path, 64, early=5)
    assert run.returncode != 0 and "a barrier: every emulated thread waits and none can go on" in run.stderr
