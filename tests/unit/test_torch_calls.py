"""gemm() with torch tensors: the first call of a signature takes the full path, later ones the hot path (data
pointers to the launcher, on the stream of the call). On the CPU: torch CPU tensors, a fake core and launcher."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from autotune.serve import calls, runtime, torch_calls  # noqa: E402


class Launcher:
    vendor, provisional = False, False

    def __init__(self):
        self.launches = []

    def launch_ptrs(self, a, b, out, alpha, beta, stream):
        self.launches.append((a, b, out, alpha, beta, stream))


@pytest.fixture
def cpu(monkeypatch):
    """The GPU-facing pieces on the CPU: device 0 current, a numbered stream per call, a fake full path whose
    core reports reading everything in place with ``launcher``."""
    streams = iter(range(1000))
    monkeypatch.setattr(torch_calls, "_device", lambda: -1)
    monkeypatch.setattr(torch_calls, "stream_of_torch", lambda device: ("stream", device, next(streams)))
    monkeypatch.setattr(torch_calls, "torch_stream", contextlib.nullcontext)
    launcher, full = Launcher(), []

    def core(a, b, out, alpha, beta, precision, tuned_dir, sig=None, torch_args=None, seen=None):
        full.append((a.data_ptr(), b.data_ptr(), out.data_ptr()))
        seen.update(launcher=launcher, in_place=True)
        return out

    runtime.forget_launchers()
    yield launcher, full, core
    runtime.forget_launchers()


def gemm(core, a, b, out=None, alpha=1.0, beta=0.0):
    return torch_calls.gemm_torch(core, a, b, out, alpha, beta, None, None)


def test_the_first_call_takes_the_full_path_and_later_ones_the_hot_path(cpu):
    launcher, full, core = cpu
    a, b, out = torch.randn(4, 8), torch.randn(8, 6), torch.empty(4, 6)
    gemm(core, a, b, out)
    assert len(full) == 1 and launcher.launches == []
    for beta in (0.0, 1.0):
        assert gemm(core, a, b, out, 2.0, beta) is out
    assert len(full) == 1  # no conversion, no copy, no CuPy arrays: pointers to the launcher
    assert launcher.launches == [(a.data_ptr(), b.data_ptr(), out.data_ptr(), 2.0, beta, ("stream", -1, i))
                                 for i, beta in enumerate((0.0, 1.0))]  # fmt: skip
    c = gemm(core, a, b)  # no out: another signature, allocated by torch
    c = gemm(core, a, b)
    assert c.shape == (4, 6) and launcher.launches[-1][2] == c.data_ptr() and len(full) == 2


def test_a_transposed_view_is_read_in_place_through_the_same_pointer(cpu):
    launcher, full, core = cpu
    a, w = torch.randn(4, 8).half(), torch.randn(6, 8).half()
    out = torch.empty(4, 6).half()
    gemm(core, a, w.t(), out)
    gemm(core, a, w.t(), out)
    assert len(full) == 1 and launcher.launches[0][1] == w.data_ptr()


def test_misaligned_operands_and_copies_never_take_the_hot_path(cpu):
    launcher, full, core = cpu
    a, b, out = torch.randn(4, 8), torch.randn(8, 6), torch.empty(4, 6)
    gemm(core, a, b, out)
    odd = torch.randn(4 * 8 + 1)[1:].view(4, 8)  # the same signature, 4 bytes off a 16-byte boundary
    gemm(core, odd, b, out)
    assert len(full) == 2 and launcher.launches == []
    strided = torch.randn(8, 12)[:, :6]  # copied by the full path: its signature is never remembered
    for _ in range(2):
        gemm(core, a, strided, out)
    assert len(full) == 4


def test_the_signature_covers_the_environment_and_forget_launchers_clears_it(cpu, monkeypatch):
    launcher, full, core = cpu
    a, b, out = torch.randn(4, 8), torch.randn(8, 6), torch.empty(4, 6)
    gemm(core, a, b, out)
    monkeypatch.setenv(runtime.ENV_VENDOR, "0")  # the runtime may serve another launcher now
    gemm(core, a, b, out)
    gemm(core, a, b, out)
    runtime.forget_launchers()
    gemm(core, a, b, out)
    assert len(full) == 3 and len(launcher.launches) == 1


def test_a_vendor_launcher_serves_the_hot_path_with_torchs_op(cpu):
    launcher, full, core = cpu
    done = []
    launcher.vendor = True
    launcher.torch_gemm = lambda a, b, out, alpha, beta: done.append((a, b, out, alpha, beta))
    a, b, out = torch.randn(4, 8), torch.randn(8, 6), torch.empty(4, 6)
    gemm(core, a, b, out)
    gemm(core, a, b, out, 1.0, 0.5)
    assert done == [(a, b, out, 1.0, 0.5)] and len(full) == 1


def test_gemm_hands_torch_tensors_to_this_path(monkeypatch):
    seen = []
    monkeypatch.setattr(torch_calls, "gemm_torch", lambda core, *args: seen.append(core) or "done")
    assert calls.gemm(torch.randn(2, 2), torch.randn(2, 2)) == "done" and seen == [calls._gemm]


def conv_core(launcher, full):
    """calls._conv2d as the full path: reports ``launcher``, the output shape and reading in place."""

    def core(x, w, stride, padding, layout, out, tuned_dir, torch_args=None, seen=None):
        full.append((x.data_ptr(), w.data_ptr()))
        (n, _, h, wd), (k, _, r, s) = x.shape, w.shape
        shape = (n, k, (h + 2 * padding - r) // stride + 1, (wd + 2 * padding - s) // stride + 1)
        seen.update(launcher=launcher, out_shape=shape, in_place=True)
        return out if out is not None else torch.empty(shape)

    return core


def conv(core, x, w, out=None, stride=1, padding=1):
    return torch_calls.conv_torch(core, x, w, stride, padding, "NCHW", out, None)


def test_conv2d_takes_the_hot_path_from_its_second_call(cpu):
    launcher, full, _ = cpu
    core = conv_core(launcher, full)
    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)
    first = conv(core, x, w)
    second = conv(core, x, w)
    assert len(full) == 1 and second.shape == first.shape == (2, 6, 8, 8)
    assert launcher.launches == [(x.data_ptr(), w.data_ptr(), second.data_ptr(), 1.0, 0.0, ("stream", -1, 0))]
    out = torch.empty(2, 6, 4, 4)  # stride 2 into a given output: another signature
    conv(core, x, w, out, stride=2)
    assert conv(core, x, w, out, stride=2) is out and launcher.launches[-1][2] == out.data_ptr() and len(full) == 2


def test_conv2d_hot_path_of_the_vendor_runs_torchs_convolution(cpu):
    launcher, full, _ = cpu
    launcher.vendor = True
    launcher.torch_conv = lambda x, w: torch.nn.functional.conv2d(x, w, padding=1)
    core = conv_core(launcher, full)
    x, w = torch.randn(1, 4, 8, 8), torch.randn(6, 4, 3, 3)
    conv(core, x, w)
    torch.testing.assert_close(conv(core, x, w), torch.nn.functional.conv2d(x, w, padding=1))
    assert len(full) == 1 and launcher.launches == []
