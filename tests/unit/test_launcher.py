"""Launcher.launch_ptrs, the torch drop-in's per-call launch, without a GPU: a fake kernel function records
what CuPy's launch would receive."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.core import hooks
from autotune.kernels import FAMILIES
from autotune.kernels.base import Launch
from autotune.serve import launcher
from autotune.serve.runtime import Choice

GEMM = FAMILIES["gemm"]
SIMT = dict(BM=64, BN=64, BK=16, WM=16, WN=64, WNITER=1, TM=4, TN=4, VEC=4, PAD=4, DBUF=True)


class Stream:
    """A stream object as a launch takes it: a handle, and a context that makes it current."""

    def __init__(self, ptr):
        self.ptr, self.entered = ptr, 0

    def __enter__(self):
        self.entered += 1

    def __exit__(self, *exc):
        return False


class Fn:
    def __init__(self):
        self.launches = []

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        self.launches.append((args, stream))


def simt_launcher(fn, new_scratch=None, label="64x64x64"):
    choice = Choice("simt", SIMT, "exact", "test")
    problem = GEMM.problem(label, "float32")
    return launcher.Launcher("gemm", problem, choice, fn, Launch((1, 1, 1), (128, 1, 1), 0), "k", new_scratch)


def test_pointers_and_stream_go_straight_to_the_launch(monkeypatch):
    """Unpacked: the pointers are the ints given, the constants the family's, the stream the one given."""
    monkeypatch.setattr(launcher, "PACKED", False)
    monkeypatch.setattr(launcher, "_stream_key", lambda: pytest.fail("the stream is given, not looked up"))
    fn, s = Fn(), Stream(7)
    simt_launcher(fn).launch_ptrs(1024, 2048, 4096, 1.0, 0.5, s)
    (args, stream), = fn.launches  # fmt: skip
    assert args[:3] == (1024, 2048, 4096) and stream is s
    assert [int(v) for v in args[3:6]] == [64, 64, 64] and [float(v) for v in args[6:8]] == [1.0, 0.5]


@pytest.mark.skipif(not launcher._cupy_args(), reason="this CuPy has no CIntptr / CNumpyArray")
def test_packed_arguments_are_made_once_per_alpha_and_beta():
    """Packed: CuPy's argument objects, the constants made on the first call and reused, the pointers per call."""
    fn, s = Fn(), Stream(7)
    ours = simt_launcher(fn)
    for ptr in (1024, 2048):
        ours.launch_ptrs(ptr, ptr + 16, ptr + 32, 1.0, 0.0, s)
    ours.launch_ptrs(1024, 2048, 4096, 1.0, 1.0, s)
    (first, _), (second, _), (other, _) = fn.launches
    assert all(isinstance(x, launcher._PTR) for x in first[:3] + second[:3])
    assert all(isinstance(x, launcher._VALUE) for x in first[3:]) and len(first) == 8
    assert all(a is b for a, b in zip(first[3:], second[3:], strict=True))  # no conversion per call
    assert other[7] is not first[7] and len(ours._packed) == 2  # beta 1: its own constants


def test_scratch_is_per_stream_and_made_with_that_stream_current(monkeypatch):
    monkeypatch.setattr(launcher, "PACKED", False)
    monkeypatch.setattr("autotune.measure.streams.capturing", lambda: False)
    made = []

    def new_scratch():
        made.append((np.zeros(1), np.zeros(1)))
        return made[-1]

    fn, s1, s2 = Fn(), Stream(11), Stream(12)
    ours = simt_launcher(fn, new_scratch)
    for s in (s1, s1, s2):
        ours.launch_ptrs(16, 32, 48, 1.0, 0.0, s)
    assert len(made) == 2 and s1.entered == 1 and s2.entered == 1  # buffers zeroed on the stream that uses them
    assert fn.launches[0][0][-2:] == fn.launches[1][0][-2:] == made[0] and fn.launches[2][0][-2:] == made[1]


def test_templates_reading_data_ptr_get_device_pointers(monkeypatch):
    """A template with its own scratch kind (skinny_wgmma's tensor maps read ``a.data.ptr``) gets operands that
    are the addresses and answer ``.data.ptr``."""
    seen = []

    def args_for(template, params, problem):
        def args(a, b, out, alpha, beta, scratch):
            seen.append((a.data.ptr, b.data.ptr, out))
            return (a, b, out)

        return args

    ours = simt_launcher(Fn())
    monkeypatch.setattr(ours, "_plain_args", False)
    monkeypatch.setattr(ours, "_args", args_for(None, None, None))
    ours.launch_ptrs(1024, 2048, 4096, 1.0, 0.0, Stream(1))
    assert seen == [(1024, 2048, 4096)] and isinstance(seen[0][2], int)


def test_the_call_observer_sees_pointer_launches():
    fn, seen = Fn(), []
    ours = simt_launcher(fn)
    hooks.set_call_observer(lambda kernel, problem, run: seen.append((kernel, problem.label)) or run())
    try:
        ours.launch_ptrs(1024, 2048, 4096, 1.0, 0.0, Stream(1))
    finally:
        hooks.set_call_observer(None)
    assert seen == [("gemm", "64x64x64")] and len(fn.launches) == 1


def test_a_template_with_its_own_arguments_gets_plain_int_pointers(monkeypatch):
    """A template that makes its own kernel arguments (wgmma_decode: tensor maps made from the operands'
    addresses) sees the operands as objects with ``.data.ptr``, and CuPy receives exact ints (it refuses a
    subclass of int), never the wrapper."""
    from autotune.kernels import gemm_wgmma_decode

    made = []

    class Maps(gemm_wgmma_decode.TensorMaps):
        def _map(self, which, ptr):
            made.append((which, ptr))
            return np.zeros(1, dtype=np.dtype((np.void, 128)))

    params = dict(BW=64, MB=8, CONSUMERS=1, STAGES=4, SPLIT_K=1)
    problem = GEMM.problem("1x4096x4096", "float16", "NT")
    fn, s = Fn(), Stream(7)
    ours = launcher.Launcher("gemm", problem, Choice("wgmma_decode", params, "exact", "test"), fn,
                             Launch((64, 1, 1), (256, 1, 1), 0), "k",
                             lambda: (np.zeros(1), np.zeros(1), Maps(params, problem)))  # fmt: skip
    monkeypatch.setattr(launcher, "stream_key", lambda ptr: ptr)
    ours.launch_ptrs(1024, 2048, 4096, 1.0, 0.0, s)
    (args, _), = fn.launches  # fmt: skip
    assert made == [(0, 1024), (1, 2048)]
    assert args[:3] == (1024, 2048, 4096) and all(type(x) is int for x in args[:3])
    assert not any(isinstance(x, launcher.DevicePointer) for x in args)


def test_a_template_with_its_own_arguments_makes_them_once_per_set_of_addresses(monkeypatch):
    """The drop-in's steady state calls on addresses seen before (torch's caching allocator): the template's
    arguments (tensor maps and all) are made on the first call of each set and reused; new addresses get new ones."""
    from autotune.core import tensormap
    from autotune.kernels import gemm_wgmma_decode

    made = []

    def tiled_2d(ptr, *shape):
        made.append(ptr)
        return np.zeros(1, dtype=np.dtype((np.void, 128)))

    monkeypatch.setattr(tensormap, "tiled_2d", tiled_2d)

    params = dict(BW=64, MB=8, CONSUMERS=1, STAGES=4, SPLIT_K=1)
    problem = GEMM.problem("1x4096x4096", "float16", "NT")
    fn, s = Fn(), Stream(7)
    maps = gemm_wgmma_decode.TensorMaps(params, problem)
    choice, launch = Choice("wgmma_decode", params, "exact", "test"), Launch((64, 1, 1), (256, 1, 1), 0)
    ours = launcher.Launcher("gemm", problem, choice, fn, launch, "k", lambda: (np.zeros(1), np.zeros(1), maps))
    monkeypatch.setattr(launcher, "stream_key", lambda ptr: ptr)
    for _ in range(3):
        ours.launch_ptrs(1024, 2048, 4096, 1.0, 0.0, s)
    assert made == [1024, 2048]
    ours.launch_ptrs(1024, 2048, 8192, 1.0, 0.0, s)  # a new output address: the same maps, a new tuple
    ours.launch_ptrs(3072, 2048, 8192, 1.0, 0.0, s)  # a new input: its map is made
    assert made == [1024, 2048, 3072]
    firsts = [args[:3] for args, _ in fn.launches]
    assert firsts == [(1024, 2048, 4096)] * 3 + [(1024, 2048, 8192), (3072, 2048, 8192)]
    assert fn.launches[0][0] is fn.launches[2][0]  # the same argument tuple, not made again
