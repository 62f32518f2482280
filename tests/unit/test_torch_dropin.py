"""autotune.torch's routing decisions and fallback reasons, with fake modules, tensors and a fake runtime
(no torch, no GPU). The tests at the end use real torch on the CPU where it is installed."""

from __future__ import annotations

import copy
import dataclasses
import math
import random

import pytest

from autotune.core.errors import AutotuneError
from autotune.serve import recording
from autotune.torch import AutotuneBackend, Fallback, Report, Router, step_of, structural_reason

F16, F32, BF16, F64 = "torch.float16", "torch.float32", "torch.bfloat16", "torch.float64"


class FakeTensor:
    def __init__(self, shape, dtype=F16, cuda=True, requires_grad=False, contiguous=True, layout="NCHW"):
        self.shape, self.dtype, self.is_cuda, self.requires_grad = tuple(shape), dtype, cuda, requires_grad
        self.device = "cuda:0" if cuda else "cpu"
        self.contiguous, self.layout = contiguous, layout

    def dim(self):
        return len(self.shape)

    def view(self, *shape):
        known = math.prod(d for d in shape if d != -1)
        return FakeTensor([math.prod(self.shape) // known if d == -1 else d for d in shape], self.dtype, self.is_cuda)


class FakeLinear:
    def __init__(self, k=64, n=32, dtype=F16, bias=True):
        self.in_features, self.out_features, self.training = k, n, False
        self.weight = FakeTensor((n, k), dtype, requires_grad=True)
        self.bias = FakeTensor((n,), dtype) if bias else None
        self.torch_calls = 0

    def forward(self, x):
        self.torch_calls += 1
        return ("torch", x.shape)


class FakeConv(FakeLinear):
    def __init__(self, c=16, k=32, r=3, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1,
                 padding_mode="zeros", dtype=F16):  # fmt: skip
        super().__init__()
        self.in_channels, self.out_channels, self.kernel_size = c, k, (r, r)
        self.stride, self.padding, self.dilation, self.groups, self.padding_mode = (
            stride, padding, dilation, groups, padding_mode,
        )  # fmt: skip
        self.weight = FakeTensor((k, c, r, r), dtype, requires_grad=True)
        self.bias = FakeTensor((k,), dtype)


class FakeBackend:
    """The runtime as the router sees it: ``steps`` maps a problem label to its lookup step."""

    def __init__(self, steps=None, raises=(), grad=False):
        self.steps, self.raises, self.grad = dict(steps or {}), set(raises), grad
        self.capture, self.fail_kernel = False, False
        self.asked: list[str] = []
        self.served: list[tuple] = []

    def step(self, kernel, problem, sizes, device):
        self.asked.append(problem.label)
        if problem.label in self.raises:
            raise AutotuneError(f"{kernel} {problem.label}: no configuration fits")
        return self.steps.get(problem.label, "exact")

    def grad_enabled(self):
        return self.grad

    def on_device(self, x):
        return x.is_cuda

    on_current_device = on_device

    def capturing(self):
        return self.capture

    def layout_of(self, x):
        return x.layout if x.dim() == 4 else None

    def rows(self, x, k):
        return x.view(-1, k) if x.contiguous else None

    def linear(self, rows, weight, bias, fuse_bias):
        if self.fail_kernel:
            raise RuntimeError("launch failed")
        self.served.append(("linear", rows.shape, bias is not None, fuse_bias))
        return FakeTensor((rows.shape[0], weight.shape[0]), rows.dtype)

    def conv2d(self, x, weight, bias, stride, pad, layout, cache):
        self.served.append(("conv2d", x.shape, stride, pad, layout))
        return "ours"


def routed(module, backend=None, kind="linear"):
    return Router(module, kind, backend or FakeBackend(), fuse_bias=True)


def fallbacks(router):
    return dict(router.fallbacks)


def test_linear_is_decided_once_per_shape_and_served_through_the_runtime():
    backend = FakeBackend()
    r = routed(FakeLinear(k=64, n=32), backend)
    for _ in range(3):
        out = r(FakeTensor((2, 3, 64)))
        assert out.shape == (2, 3, 32)  # leading dims kept, flattened only for the GEMM
    assert backend.asked == ["6x32x64"]  # M = 2 * 3, N = out_features, K = in_features; asked once
    assert backend.served == [("linear", (6, 64), True, True)] * 3
    assert dict(r.calls) == {"autotune": 3}
    r(FakeTensor((5, 64)))
    assert backend.asked == ["6x32x64", "5x32x64"]


def test_a_problem_the_runtime_gives_the_vendor_runs_torchs_op_directly():
    backend = FakeBackend(steps={"1x32x64": "vendor"})
    m = FakeLinear()
    r = routed(m, backend)
    assert r(FakeTensor((1, 64))) == ("torch", (1, 64))
    assert r(FakeTensor((4, 64))).shape == (4, 32)
    assert m.torch_calls == 1 and r.layer_report("m").calls == {"vendor": 1, "autotune": 1} and not r.fallbacks
    assert r(FakeTensor((1, 64))) == ("torch", (1, 64)) and r.layer_report("m").calls["vendor"] == 2  # steady state


def test_vendor_calls_are_reported_to_an_active_recorder(monkeypatch):
    monkeypatch.setattr(recording, "_observer_setter", lambda: None)
    monkeypatch.setattr(recording, "_warned", [True])
    seen = []

    class Timer:
        def begin(self):
            return 0

        def end(self, token):
            return 0

        def elapsed_ms(self, pending):
            return 0.5

    r = routed(FakeLinear(), FakeBackend(steps={"3x32x64": "vendor"}))
    with recording.record(timer=Timer(), gpu=None) as rec:
        seen.append(r(FakeTensor((3, 64))))
    assert seen == [("torch", (3, 64))]
    (p,) = rec.workload.problems
    assert (p.kernel, p.dtype, p.layout, p.shape, p.calls, p.time_share) == ("gemm", "float16", "NT", "3x32x64", 1, 1)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda m, x, b: setattr(m, "training", True), Fallback.TRAINING),
        (lambda m, x, b: setattr(b, "grad", True), Fallback.AUTOGRAD),  # grad on, the weight requires it
        (lambda m, x, b: setattr(x, "is_cuda", False), Fallback.DEVICE),
        (lambda m, x, b: setattr(x, "dtype", F64), Fallback.MIXED_DTYPE),
        (lambda m, x, b: setattr(x, "contiguous", False), Fallback.INPUT),
        (lambda m, x, b: setattr(x, "shape", (4, 63)), Fallback.INPUT),
        (lambda m, x, b: setattr(x, "shape", (0, 64)), Fallback.INPUT),
        (lambda m, x, b: b.raises.add("4x32x64"), Fallback.RUNTIME),
    ],
)
def test_linear_fallbacks_are_counted_with_their_reason(change, reason):
    m, x, backend = FakeLinear(), FakeTensor((4, 64)), FakeBackend()
    change(m, x, backend)
    r = routed(m, backend)
    assert r(x)[0] == "torch" and r(x)[0] == "torch"
    assert fallbacks(r) == {reason.value: 2} and dict(r.calls) == {"torch": 2} and not backend.served


def test_grad_mode_alone_does_not_block_routing():
    m = FakeLinear()
    m.weight.requires_grad = False
    r = routed(m, FakeBackend(grad=True))
    assert r(FakeTensor((4, 64))).shape == (4, 32)
    assert r(FakeTensor((4, 64), requires_grad=True))[0] == "torch"
    assert fallbacks(r) == {Fallback.AUTOGRAD.value: 1}


@pytest.mark.parametrize("dtype, served", [(F32, True), (F16, True), (BF16, True), (F64, False)])
def test_linear_dtypes(dtype, served):
    r = routed(FakeLinear(dtype=dtype))
    r(FakeTensor((4, 64), dtype))
    assert dict(r.calls) == ({"autotune": 1} if served else {"torch": 1})
    assert fallbacks(r) == ({} if served else {Fallback.DTYPE.value: 1})


def test_a_kernel_that_fails_is_not_tried_again():
    backend = FakeBackend()
    r = routed(FakeLinear(), backend)
    backend.fail_kernel = True
    assert r(FakeTensor((4, 64)))[0] == "torch"
    backend.fail_kernel = False
    assert r(FakeTensor((4, 64)))[0] == "torch"
    assert fallbacks(r) == {Fallback.RUNTIME.value: 2} and backend.asked == ["4x32x64"]
    (plan,) = r.layer_report("fc").plans
    assert plan[1:] == ("torch", Fallback.RUNTIME.value)


def test_a_new_shape_during_graph_capture_runs_torch_and_is_decided_after():
    backend = FakeBackend()
    r = routed(FakeLinear(), backend)
    r(FakeTensor((1, 64)))  # warm-up before capture
    backend.capture = True
    assert r(FakeTensor((1, 64))).shape == (1, 32)  # known: served while capturing
    assert r(FakeTensor((8, 64)))[0] == "torch"  # new: no runtime lookup inside a capture
    backend.capture = False
    assert r(FakeTensor((8, 64))).shape == (8, 32)
    assert backend.asked == ["1x32x64", "8x32x64"]
    assert fallbacks(r) == {Fallback.CAPTURE.value: 1} and dict(r.calls) == {"autotune": 3, "torch": 1}


def test_conv_problems_carry_stride_padding_and_layout():
    backend = FakeBackend()
    r = routed(FakeConv(c=3, k=8, r=3, stride=(2, 2), padding=(1, 1)), backend, "conv2d")
    assert r(FakeTensor((2, 3, 32, 32), layout="NHWC")) == "ours"
    assert r(FakeTensor((2, 3, 32, 32), layout="NCHW")) == "ours"
    assert backend.asked == ["n2c3h32w32k8r3s3u2p1"] * 2  # one decision per memory format
    assert [s[-1] for s in backend.served] == ["NHWC", "NCHW"]
    report = r.layer_report("conv")
    assert [p[1:] for p in report.plans] == [("autotune", "exact")] * 2


@pytest.mark.parametrize(
    "attrs, reason",
    [
        ({"groups": 2}, Fallback.GROUPS),
        ({"dilation": (2, 2)}, Fallback.DILATION),
        ({"stride": (1, 2)}, Fallback.ASYMMETRIC),
        ({"padding": (1, 0)}, Fallback.ASYMMETRIC),
        ({"padding_mode": "reflect"}, Fallback.PADDING_MODE),
        ({"padding": "same"}, Fallback.PADDING_STRING),
        ({"padding": "valid"}, Fallback.PADDING_STRING),
    ],
)
def test_conv_structural_fallbacks(attrs, reason):
    m = FakeConv(**attrs)
    backend = FakeBackend()
    r = routed(m, backend, "conv2d")
    assert r(FakeTensor((1, 16, 8, 8)))[0] == "torch"
    assert fallbacks(r) == {reason.value: 1} and not backend.asked


@pytest.mark.parametrize(
    "x, reason",
    [
        (FakeTensor((1, 16, 8, 8), BF16), Fallback.MIXED_DTYPE),  # weight fp16
        (FakeTensor((1, 16, 8, 8), layout=None), Fallback.INPUT),  # dense in neither format
        (FakeTensor((16, 8, 8)), Fallback.INPUT),  # unbatched
        (FakeTensor((1, 8, 8, 8)), Fallback.INPUT),  # channels differ from the weight's
        (FakeTensor((1, 16, 1, 1)), Fallback.INPUT),  # the padded input is smaller than the filter
    ],
)
def test_conv_input_fallbacks(x, reason):
    m = FakeConv(padding=(0, 0))
    r = routed(m, FakeBackend(), "conv2d")
    assert r(x)[0] == "torch" and fallbacks(r) == {reason.value: 1}


def test_bfloat16_convolutions_have_no_kernel():
    r = routed(FakeConv(dtype=BF16), FakeBackend(), "conv2d")
    r(FakeTensor((1, 16, 8, 8), BF16))
    assert fallbacks(r) == {Fallback.DTYPE.value: 1}


def test_structural_reason_is_none_exactly_for_routable_convolutions():
    rng = random.Random(0)
    for _ in range(300):
        attrs = {
            "groups": rng.choice([1, 1, 2, 16]),
            "dilation": rng.choice([(1, 1), (1, 1), (2, 2), (1, 2)]),
            "stride": rng.choice([(1, 1), (2, 2), (1, 2), (3, 3)]),
            "padding": rng.choice([(0, 0), (1, 1), (3, 3), (0, 1), "same", "valid"]),
            "padding_mode": rng.choice(["zeros", "zeros", "reflect", "circular"]),
        }
        routable = (
            attrs["groups"] == 1
            and attrs["dilation"] == (1, 1)
            and len(set(attrs["stride"])) == 1
            and not isinstance(attrs["padding"], str)
            and len(set(attrs["padding"])) == 1
            and attrs["padding_mode"] == "zeros"
        )
        assert (structural_reason("conv2d", FakeConv(**attrs)) is None) == routable, attrs
    assert structural_reason("linear", FakeLinear()) is None


def test_report_adds_up_layers():
    backend = FakeBackend(steps={"1x32x64": "vendor"})
    a, b = routed(FakeLinear(), backend), routed(FakeConv(groups=2), backend, "conv2d")
    a(FakeTensor((1, 64)))
    a(FakeTensor((2, 64)))
    a(FakeTensor((2, 63)))
    b(FakeTensor((1, 16, 8, 8)))
    rep = Report((a.layer_report("fc"), b.layer_report("conv")), {"head": "Custom overrides forward"})
    assert (rep.count("autotune"), rep.count("vendor"), rep.count("torch")) == (1, 1, 2)
    assert rep.fallbacks == {Fallback.GROUPS.value: 1, Fallback.INPUT.value: 1}
    text = str(rep)
    assert "1 calls by autotune, 1 by the vendor, 2 fallbacks" in text and "head" in text


# --- with real torch on the CPU (where torch is installed) --------------------------------------------------------


def on_cpu(ptr, shape, dtype):
    """The CPU tensor at address ``ptr`` (what a kernel given ``data_ptr()`` reads and writes)."""
    import ctypes

    import torch

    size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_byte * size).from_address(ptr), dtype=dtype).view(shape)


class PointerLauncher:
    """A launcher of ours as the fast serve sees it: ``launch_ptrs`` on raw addresses, computed by torch on the
    CPU from the memory at those addresses (the problem says the shapes and layout)."""

    vendor, provisional = False, False

    def __init__(self, problem, served):
        self.problem, self.served, self.streams, self.fail = problem, served, [], False

    def launch_ptrs(self, a, b, out, alpha, beta, stream, bias=0):
        import torch

        if self.fail:
            raise RuntimeError("launch failed")
        p, dt = self.problem, getattr(torch, self.problem.dtype)
        self.streams.append(stream)
        if hasattr(p, "M"):  # nn.Linear's GEMM: A [M, K], B stored [N, K] (layout NT), C [M, N]
            assert p.layout == "NT" and bool(bias) == p.bias  # the bias pointer exactly where the kernel takes one
            c = on_cpu(out, (p.M, p.N), dt)
            prod = alpha * on_cpu(a, (p.M, p.K), dt) @ on_cpu(b, (p.N, p.K), dt).t()
            if p.bias:
                prod = prod + on_cpu(bias, (p.N,), dt)
            c.copy_(prod + (beta * c if beta else 0))  # like a kernel: C is not read at beta = 0
            self.served.append("linear+bias" if p.bias else "linear")
            return
        nhwc = p.layout == "NHWC"
        xs, ws, ys = (((p.N, p.H, p.W, p.C), (p.K, p.R, p.S, p.C), (p.N, p.P, p.Q, p.K)) if nhwc
                      else ((p.N, p.C, p.H, p.W), (p.K, p.C, p.R, p.S), (p.N, p.K, p.P, p.Q)))  # fmt: skip
        x, w, y = on_cpu(a, xs, dt), on_cpu(b, ws, dt), on_cpu(out, ys, dt)
        if nhwc:
            x, w, y = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), y.permute(0, 3, 1, 2)
        y.copy_(torch.nn.functional.conv2d(x, w, None, p.stride, p.pad))
        self.served.append(p.layout)


class CPUBackend(AutotuneBackend):
    """The real backend's tensor code, with torch's matmul and conv on the CPU standing in for the kernels:
    the fast serve launches a ``PointerLauncher``; ``pointers=False`` leaves only the general path."""

    def __init__(self, pointers=True, epilogue=False):
        self.served: list[str] = []
        self.pointers, self.launchers, self.epilogue = pointers, [], epilogue

    def launcher(self, plan, device):
        if not self.pointers:
            return FakeLauncher("exact", vendor=True)
        self.launchers.append(PointerLauncher(plan.problem, self.served))
        return self.launchers[-1]

    def bias_launcher(self, launcher, device):  # epilogue=True: the kernel has the bias epilogue (serve.bias_epilogue)
        if not self.epilogue:
            return None  # a test's launcher is not ours: None, as for the vendor's
        self.launchers.append(PointerLauncher(dataclasses.replace(launcher.problem, bias=True), self.served))
        return self.launchers[-1]

    @staticmethod
    def device_reader():
        return lambda: -1  # the CPU tensors' get_device()

    @staticmethod
    def stream_of(device):
        return ("torch's current stream on", device)

    @staticmethod
    def bias_rows(out, bias, rows, stream):  # the device-to-device copies of the real backend, with torch on the CPU
        assert stream is not None and out.numel() == rows * bias.numel()
        out.copy_(bias.expand(out.shape))
        return True

    @staticmethod
    def step(kernel, problem, sizes, device):
        return "exact"

    @staticmethod
    def on_device(x):
        return True

    on_current_device = on_device

    @staticmethod
    def capturing():
        return False

    def linear(self, rows, weight, bias, fuse_bias):
        self.served.append("linear")
        return super().linear(rows, weight, bias, fuse_bias)

    def conv2d(self, x, weight, bias, stride, pad, layout, cache):
        self.served.append(layout)
        return super().conv2d(x, weight, bias, stride, pad, layout, cache)

    @staticmethod
    def gemm(a, b, out, alpha, beta):
        assert b.stride() == (1, b.shape[0])  # W read in place through .t(), never copied
        out.copy_(alpha * (a @ b) + (beta * out if beta else 0))  # like a kernel: C is not read at beta = 0

    @staticmethod
    def conv(x, w, stride, pad, layout, out):
        import torch

        if layout == "NHWC":  # the kernel's view: x[N,H,W,C], w[K,R,S,C], out[N,P,Q,K], all dense
            assert x.is_contiguous() and w.is_contiguous() and out.is_contiguous()
            x, w, out = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), out.permute(0, 3, 1, 2)
        else:
            assert x.is_contiguous() and w.is_contiguous() and out.is_contiguous()
        out.copy_(torch.nn.functional.conv2d(x, w, None, stride, pad))


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def small_model(torch):
    nn = torch.nn

    class Custom(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2

    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2),
        nn.Conv2d(8, 16, 1, bias=False), nn.Flatten(), nn.Linear(16 * 4 * 4, 32), Custom(32, 32), nn.Linear(32, 10),
    ).eval()  # fmt: skip


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("fuse_bias", [True, False])
def test_optimized_model_matches_torch_on_the_cpu(torch, channels_last, fuse_bias):
    import autotune.torch as at

    torch.manual_seed(0)
    model = small_model(torch)
    x = torch.randn(2, 3, 8, 8)
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    keys = list(model.state_dict())
    with torch.no_grad():
        want = model(x)
        backend = CPUBackend()
        assert at.optimize(model, backend=backend, fuse_bias=fuse_bias, fuse=False) is model  # fused: test_torch_fusion
        got = model(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # CPU BLAS and oneDNN: ulp-level differences
    assert list(model.state_dict()) == keys
    layout = "NHWC" if channels_last else "NCHW"
    assert backend.served == [layout, layout, "linear", "linear"]
    rep = at.report(model)
    assert rep.count("autotune") == 4 and rep.fallbacks == {Fallback.GROUPS.value: 1}
    assert rep.skipped == {"6": "Custom overrides forward"}
    assert copy.deepcopy(model)(x).shape == (2, 10)
    with torch.enable_grad():  # autograd: parameters need grad, torch serves every call
        model(x)
    assert at.report(model).fallbacks[Fallback.AUTOGRAD.value] == 4
    at.restore(model)
    assert "forward" not in model[0].__dict__ and at.report(model).layers == ()


def test_training_mode_and_reset(torch):
    import autotune.torch as at

    model = at.optimize(torch.nn.Linear(8, 4).eval(), backend=CPUBackend())
    with torch.no_grad():
        model(torch.randn(3, 8))
        model.train()
        model(torch.randn(3, 8))
    assert at.report(model, reset=True).fallbacks == {Fallback.TRAINING.value: 1}
    assert at.report(model).count("torch") == 0


def test_import_autotune_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, autotune; autotune.record; assert 'torch' not in sys.modules, 'torch imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


class FakeLauncher:
    def __init__(self, step, vendor):
        self.provenance, self.vendor = {"step": step, "why": "measured"}, vendor


@pytest.mark.parametrize(
    "step, vendor, want",
    [("exact", False, "exact"), ("online", False, "online"), ("vendor", True, "vendor"),
     ("online", True, "vendor (online)"), ("default", False, "default")],
)  # fmt: skip
def test_a_vendor_launcher_is_vendor_whatever_step_chose_it(step, vendor, want):
    assert step_of(FakeLauncher(step, vendor)) == want
    backend = FakeBackend(steps={"4x32x64": want})
    r = routed(FakeLinear(), backend)
    r(FakeTensor((4, 64)))
    assert r.layer_report("m").calls == ({"vendor": 1} if vendor else {"autotune": 1})


def test_a_filter_in_the_other_memory_format_is_converted_once_per_version(torch):
    w = torch.randn(8, 4, 3, 3).to(memory_format=torch.channels_last)
    cache: dict = {}
    first = AutotuneBackend.weight_as(w, "NCHW", cache)
    assert first.is_contiguous() and torch.equal(first, w)
    assert AutotuneBackend.weight_as(w, "NCHW", cache) is first  # no conversion per call
    nhwc = AutotuneBackend.weight_as(w, "NHWC", cache)
    assert nhwc.is_contiguous() and nhwc.data_ptr() == w.data_ptr()  # already NHWC: a view, nothing cached
    with torch.no_grad():
        w.mul_(2)  # changed in place: its version moves, the copy is made again
    again = AutotuneBackend.weight_as(w, "NCHW", cache)
    assert again is not first and torch.equal(again, w) and len(cache) == 1


def test_layout_of_real_tensors(torch):
    x = torch.randn(2, 3, 5, 5)
    assert AutotuneBackend.layout_of(x) == "NCHW"
    assert AutotuneBackend.layout_of(x.to(memory_format=torch.channels_last)) == "NHWC"
    assert AutotuneBackend.layout_of(x[:, :, ::2]) is None  # dense in neither format
    assert AutotuneBackend.layout_of(x[0]) is None  # unbatched
    assert AutotuneBackend.rows(torch.randn(2, 3, 8), 8).shape == (6, 8)
    assert AutotuneBackend.rows(torch.randn(8, 6).t(), 8) is None


def test_the_default_backend_hands_torch_tensors_to_the_runtime(torch, monkeypatch):
    from autotune.serve import calls as serve_calls

    calls = []

    def fake_gemm(a, b, out, alpha, beta):
        calls.append((b.data_ptr(), b.stride(), alpha, beta))
        out.copy_(alpha * (a @ b) + (beta * out if beta else 0))  # like a kernel: C is not read at beta = 0

    monkeypatch.setattr(serve_calls, "gemm", fake_gemm)
    backend = AutotuneBackend()
    assert backend.grad_enabled is torch.is_grad_enabled
    rows, w, bias = torch.randn(3, 8), torch.randn(5, 8), torch.randn(5)
    out = backend.linear(rows, w, bias, fuse_bias=True)
    torch.testing.assert_close(out, torch.nn.functional.linear(rows, w, bias), rtol=1e-5, atol=1e-5)
    assert calls == [(w.data_ptr(), (1, 8), 1.0, 1.0)]  # W in place through .t(); the bias in the epilogue


@pytest.mark.parametrize(("ours_ms", "torch_ms", "route"), [(1.0, 2.0, "autotune"), (2.0, 1.0, "vendor")])
def test_the_first_call_of_a_shape_races_our_kernel_against_torchs_op(torch, ours_ms, torch_ms, route):
    """The faster of our kernel and torch's own op (as the user's torch runs it) serves every later call."""
    import autotune.torch as at

    class Racing(CPUBackend):
        def race(self, ours, theirs, x):
            ours(), theirs()  # both run on the real input
            return ours_ms, torch_ms

    model = torch.nn.Sequential(torch.nn.Linear(16, 8)).eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        want = model(x)
        at.optimize(model, backend=Racing())
        for _ in range(3):
            torch.testing.assert_close(model(x), want, rtol=1e-4, atol=1e-4)
    layer = at.report(model).layers[0]
    assert layer.plans[0][1] == route and "raced on this input" in layer.plans[0][2]
    assert layer.calls.get(route, 0) == 3


# --- the fast serve: the steady state of a routed call -------------------------------------------------------------


def test_the_steady_state_launches_on_data_pointers_with_the_stream_read_per_call(torch):
    """After the first call, a call is: the signature looked up, the output allocated, the launch on the operands'
    data pointers (W in place, as [out, in]) on the stream of this call; the general path is not taken."""
    import autotune.torch as at

    layer = torch.nn.Linear(16, 8).eval()
    backend = CPUBackend()
    streams = iter(range(100))
    backend.stream_of = lambda device: ("stream", next(streams))
    model = at.optimize(torch.nn.Sequential(layer), backend=backend)
    x = torch.randn(2, 3, 16)
    with torch.no_grad():
        want = torch.nn.functional.linear(x, layer.weight, layer.bias)
        for _ in range(3):
            torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
    (launcher,) = backend.launchers
    assert launcher.streams == [("stream", 0), ("stream", 1), ("stream", 2)]  # never cached across calls
    assert backend.served == ["linear"] * 3 and at.report(model).layers[0].calls == {"autotune": 3}


def test_calls_the_fast_serve_cannot_take_go_the_general_path(torch):
    """An input off a 16-byte boundary: the runtime's general path (which copies it) serves that call."""
    import autotune.torch as at

    layer = torch.nn.Linear(16, 8, bias=False).eval()
    backend = CPUBackend()
    model = at.optimize(torch.nn.Sequential(layer), backend=backend)
    base = torch.randn(3 * 16 + 1)
    x = base[1:].view(3, 16)  # 4 bytes past an aligned start
    assert x.data_ptr() % 16 and x.is_contiguous()
    with torch.no_grad():
        model(torch.randn(3, 16))
        torch.testing.assert_close(model(x), x @ layer.weight.t(), rtol=1e-5, atol=1e-5)
    assert backend.served == ["linear", "linear"] and len(backend.launchers) == 1  # the second by backend.linear


def test_forgetting_the_launchers_rebuilds_the_fast_serve(torch):
    import autotune.torch as at
    from autotune.serve import runtime

    backend = CPUBackend()
    model = at.optimize(torch.nn.Linear(16, 8).eval(), backend=backend)
    x = torch.randn(4, 16)
    with torch.no_grad():
        model(x)
        model(x)
        runtime.forget_launchers()  # after set_online(...), say: the runtime decides again
        model(x)
    assert len(backend.launchers) == 2


def test_a_race_won_by_torch_leaves_no_fast_serve_behind(torch):
    import autotune.torch as at

    class TorchWins(CPUBackend):
        def race(self, ours, theirs, x):
            ours(), theirs()
            return 2.0, 1.0

    backend = TorchWins()
    model = at.optimize(torch.nn.Linear(16, 8).eval(), backend=backend)
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 16))
    assert at.report(model).layers[0].calls == {"vendor": 3} and backend.served == ["linear"]  # the race's only


def test_a_fast_serve_that_fails_hands_the_problem_to_torch(torch, caplog):
    import autotune.torch as at

    backend = CPUBackend()
    model = at.optimize(torch.nn.Linear(16, 8).eval(), backend=backend)
    x = torch.randn(4, 16)
    with torch.no_grad():
        model(x)
        backend.launchers[0].fail = True
        want = torch.nn.functional.linear(x, model.weight, model.bias)
        torch.testing.assert_close(model(x), want)
        model(x)
    rep = at.report(model).layers[0]
    assert rep.fallbacks == {Fallback.RUNTIME.value: 2} and rep.calls == {"autotune": 1, "torch": 2}
    assert "launch failed" in caplog.text


def test_the_race_times_each_side_in_turn_after_a_spin_and_takes_the_median_per_call():
    """The timing loop of the first-call race, with CUDA's events and spin stood in for by a fake clock: each run
    is timed between its own events, after its spin, and the median is divided by the calls in a run."""
    from types import SimpleNamespace

    from autotune.serve import torch_backend

    clock, spins = [0.0], []

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self):
            self.at = clock[0]

        def elapsed_time(self, end):
            return end.at - self.at

        def synchronize(self):
            pass

    def sleep(cycles):
        spins.append(cycles)
        clock[0] += 1000.0  # the spin runs before the start event: never timed

    def run(ms):
        return lambda: clock.__setitem__(0, clock[0] + next(ms))

    fake = SimpleNamespace(cuda=SimpleNamespace(Event=Event, _sleep=sleep))
    ours, theirs = iter([4.0, 40.0, 4.0]), iter([8.0, 8.0, 2.0])
    timed = torch_backend._interleaved(fake, (run(ours), run(theirs)), repeats=3, spin=7, calls=2)
    assert timed == (2.0, 4.0) and spins == [7] * 6


def test_bias_rows_are_one_copy_for_a_row_and_one_2d_copy_with_source_pitch_0_until_the_runtime_refuses(monkeypatch):
    cupy = pytest.importorskip("cupy")
    from autotune.serve import torch_backend

    rt, calls = cupy.cuda.runtime, []
    refuse = [False]

    def copy2d(*args):
        calls.append(("2d", *args))
        if refuse[0]:
            raise rt.CUDARuntimeError(1)  # cudaErrorInvalidValue

    monkeypatch.setattr(rt, "memcpyAsync", lambda *args: calls.append(("1d", *args)))
    monkeypatch.setattr(rt, "memcpy2DAsync", copy2d)
    monkeypatch.setattr(torch_backend, "_broadcast_2d", None)
    capturing = [True]
    monkeypatch.setattr(torch_backend.AutotuneBackend, "capturing", staticmethod(lambda: capturing[0]))
    d2d = rt.memcpyDeviceToDevice
    assert torch_backend._copy_rows(4096, 512, 2048, 0, 7) and calls == []  # no row: nothing to copy
    assert torch_backend._copy_rows(4096, 512, 2048, 1, 7)  # one row: one copy, capturing or not
    assert calls == [("1d", 4096, 512, 2048, d2d, 7)]
    assert not torch_backend._copy_rows(4096, 512, 2048, 16, 7) and len(calls) == 1  # untried: not in a capture
    capturing[0] = False
    assert torch_backend._copy_rows(4096, 512, 2048, 16, 7)
    assert calls[-1] == ("2d", 4096, 2048, 512, 0, 2048, 16, d2d, 7)
    monkeypatch.setattr(torch_backend, "_broadcast_2d", None)
    refuse[0] = True
    assert not torch_backend._copy_rows(4096, 512, 2048, 16, 7) and torch_backend._broadcast_2d is False
    tried = len(calls)
    assert not torch_backend._copy_rows(4096, 512, 2048, 16, 7) and len(calls) == tried  # not tried again


@pytest.mark.parametrize("shape", [(1, 16), (2, 3, 16)])
def test_a_kernel_with_the_bias_epilogue_adds_the_bias_in_its_one_launch(torch, shape):
    """Where the served kernel has a verified bias epilogue, a Linear's call is one launch with the bias pointer
    last: no rows set to the bias first (``bias_rows`` is not called), beta 0."""
    import autotune.torch as at

    layer = torch.nn.Linear(16, 8).eval()
    backend = CPUBackend(epilogue=True)
    backend.bias_rows = lambda *args: pytest.fail("the epilogue adds the bias: no rows are copied")
    model = at.optimize(torch.nn.Sequential(layer), backend=backend)
    x = torch.randn(*shape)
    with torch.no_grad():
        want = torch.nn.functional.linear(x, layer.weight, layer.bias)
        for _ in range(2):
            torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
    assert backend.served[-2:] == ["linear+bias"] * 2


def test_without_a_bias_epilogue_the_bias_rows_are_copied_and_added_by_beta(torch):
    import autotune.torch as at

    layer = torch.nn.Linear(16, 8).eval()
    backend, copied = CPUBackend(), []
    rows = backend.bias_rows
    backend.bias_rows = lambda out, bias, n, stream: copied.append(n) or rows(out, bias, n, stream)
    model = at.optimize(torch.nn.Sequential(layer), backend=backend)
    x = torch.randn(4, 16)
    with torch.no_grad():
        want = torch.nn.functional.linear(x, layer.weight, layer.bias)
        for _ in range(2):
            torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
    assert copied == [4, 4] and backend.served[-1] == "linear"
