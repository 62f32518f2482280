"""GPU tier for autotune.torch: a small conv + linear model, optimized, matches torch against a float64
reference in fp32 (NCHW), fp16 (NCHW and channels-last) and bf16; it runs on a side stream and inside a
captured CUDA graph; its fallbacks are counted; autotune.record() writes its workload."""

from __future__ import annotations

import copy

import pytest
import yaml

pytestmark = pytest.mark.gpu

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}  # a 5-layer model, against float64


@pytest.fixture
def torch(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    # fp32 torch (the vendor path and the reference model) in full fp32, not TF32
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    return torch


@pytest.fixture(params=["online", "ours"])
def serving(request, monkeypatch):
    """ "online": the runtime as users get it (stored winners, the online choice, the vendor); "ours": every
    problem a template of ours computes is served by it (AUTOTUNE_VENDOR=0), so our kernels run here."""
    if request.param == "ours":
        monkeypatch.setenv("AUTOTUNE_VENDOR", "0")
    return request.param


def check_counts(at, rep, serving, dtype, forwards):
    """Every routed call served (by autotune or the vendor) but the known fallbacks; our kernels ran."""
    routed = 2 if dtype == "bfloat16" else ROUTED_PER_FORWARD  # no bf16 convolution kernels
    expected = {at.Fallback.GROUPS.value: forwards}
    if dtype == "bfloat16":
        expected[at.Fallback.DTYPE.value] = 3 * forwards
    fallbacks = dict(rep.fallbacks)
    if serving == "ours":  # problems no template of ours computes (fp32 NT, say) go to torch
        fallbacks.pop(at.Fallback.RUNTIME.value, None)
        assert rep.count("autotune") > 0, rep
    else:
        assert rep.count("autotune") + rep.count("vendor") == routed * forwards, rep
    assert fallbacks == expected, rep


def small_model(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=4),  # a fallback: groups
        nn.Conv2d(32, 64, 1, bias=False), nn.Flatten(),
        nn.Linear(64 * 8 * 8, 96), nn.ReLU(), nn.Linear(96, 10),
    ).eval()  # fmt: skip


ROUTED_PER_FORWARD = 5  # 3 convolutions and 2 linear layers; the grouped convolution falls back


def models(torch, dtype, channels_last):
    """(torch's model, the optimized copy, the float64 reference copy), same weights."""
    import autotune.torch as at

    torch.manual_seed(0)
    base = small_model(torch).cuda()
    ref = copy.deepcopy(base).double()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    base = base.to(dtype=getattr(torch, dtype), memory_format=fmt)
    return base, at.optimize(copy.deepcopy(base)), ref


def rel(torch, out, ref):
    return float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize(
    "dtype, channels_last", [("float32", False), ("float16", False), ("float16", True), ("bfloat16", False)]
)
def test_optimized_model_matches_torch(torch, serving, dtype, channels_last):
    import autotune.torch as at

    base, opt, ref = models(torch, dtype, channels_last)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    with torch.inference_mode():
        for batch in (4, 1, 4):
            x = torch.randn(batch, 3, 16, 16, device="cuda", dtype=torch.float64)
            want = ref(x)
            xt = x.to(dtype=getattr(torch, dtype), memory_format=fmt)
            theirs, ours = base(xt), opt(xt)
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
            assert torch.isfinite(ours).all()
            err, torch_err = rel(torch, ours, want), rel(torch, theirs, want)
            assert err < max(TOLERANCE[dtype], 2 * torch_err), (batch, err, torch_err)
    check_counts(at, at.report(opt), serving, dtype, forwards=3)


@pytest.mark.parametrize("dtype, channels_last", [("float16", True), ("float32", False), ("bfloat16", False)])
def test_optimized_model_runs_on_a_side_stream_and_in_a_cuda_graph(torch, serving, dtype, channels_last):
    import autotune.torch as at

    base, opt, _ = models(torch, dtype, channels_last)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    static_x = torch.randn(8, 3, 16, 16, device="cuda", dtype=getattr(torch, dtype)).to(memory_format=fmt)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode():
        with torch.cuda.stream(side):  # warm-up: every plan decided (and compiled) before capture
            for _ in range(3):
                opt(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = opt(static_x)
        for seed in range(3):
            torch.manual_seed(seed)
            static_x.copy_(torch.randn_like(static_x))
            graph.replay()
            want = base(static_x)
            torch.cuda.synchronize()
            assert rel(torch, static_y, want.double()) < TOLERANCE[dtype]
    check_counts(at, at.report(opt), serving, dtype, forwards=4)  # no CAPTURE fallback: decided in the warm-up


def test_record_writes_the_models_workload(torch, serving, tmp_path):
    import autotune
    import autotune.torch as at
    from autotune.serve import recording

    if recording._observer_setter() is None:
        pytest.skip("this runtime has no call observer (set_call_observer) yet")
    _, opt, _ = models(torch, "float16", False)
    x = torch.randn(2, 3, 16, 16, device="cuda", dtype=torch.float16)
    with torch.inference_mode():
        opt(x)  # decided (and compiled) outside the recording
        at.report(opt, reset=True)
        with autotune.record(tmp_path / "w.yaml"):
            opt(x)
            opt(x)
    rep = at.report(opt)
    problems = yaml.safe_load((tmp_path / "w.yaml").read_text())["problems"]
    assert sum(p["calls"] for p in problems) == rep.count("autotune") + rep.count("vendor") == 2 * ROUTED_PER_FORWARD
    assert [p["kernel"] for p in problems] == ["conv2d"] * 3 + ["gemm"] * 2
    assert {p["layout"] for p in problems} == {"NCHW", "NT"} and {p["dtype"] for p in problems} == {"float16"}
    assert all(p["ms_per_call"] and p["ms_per_call"] > 0 for p in problems)
    assert sum(p["time_share"] for p in problems) == pytest.approx(1.0, abs=1e-4)
    assert problems[-1]["shape"] == "2x10x96"


def test_the_steady_state_follows_the_callers_stream(torch, serving):
    """Decided and warmed up on the default stream, then called on a side stream whose copy into the input
    waits behind ~10 ms of GPU work: the call must be ordered after the copy, on that stream, not the one of the
    earlier calls (the fast serve reads torch's current stream on every call)."""
    import autotune.torch as at

    layer = torch.nn.Linear(512, 256, bias=False).to("cuda", torch.float16).eval()
    opt = at.optimize(copy.deepcopy(layer))
    src = torch.randn(16, 512, device="cuda", dtype=torch.float16)
    x = torch.zeros_like(src)
    with torch.inference_mode():
        for _ in range(3):
            opt(src)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)
            x.copy_(src)
            y = opt(x)
        side.synchronize()
        want = layer(src).double()
    assert rel(torch, y, want) < TOLERANCE["float16"]


@pytest.mark.parametrize("dtype, channels_last", [("float32", False), ("float16", True), ("float16", False)])
def test_a_fused_resnet_model_matches_torch_and_replays_in_a_cuda_graph(torch, serving, dtype, channels_last):
    """BatchNorms folded, ReLUs and residual adds fused (autotune.serve.torch_fusion): our kernels with the
    epilogue after them, or cuDNN's fused convolution, agree with torch's unfused model against float64."""
    import autotune.torch as at
    from tests.unit.test_torch_fusion import net

    base = net().cuda()
    ref = copy.deepcopy(base).double()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    base = base.to(dtype=getattr(torch, dtype), memory_format=fmt)
    opt = at.optimize(copy.deepcopy(base))
    assert "8 BatchNorm folded, 5 conv+ReLU and 2 conv+add+ReLU" in at.report(opt).fusion
    static_x = torch.randn(4, 3, 24, 24, device="cuda", dtype=getattr(torch, dtype)).to(memory_format=fmt)
    with torch.inference_mode():
        for _ in range(3):  # plans decided, races run, outside the capture
            opt(static_x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = opt(static_x)
        for seed in range(2):
            torch.manual_seed(seed)
            static_x.copy_(torch.randn_like(static_x))
            graph.replay()
            want, theirs = ref(static_x.double()), base(static_x)
            torch.cuda.synchronize()
            err, torch_err = rel(torch, static_y, want), rel(torch, theirs, want)
            assert err < max(TOLERANCE[dtype], 2 * torch_err), (seed, err, torch_err)
    rep = at.report(opt)  # 8 convolutions and the Linear, 3 forwards and the captured one
    assert sum(rep.count(route) for route in ("autotune", "vendor", "torch")) == 9 * 4, rep
    fallbacks = dict(rep.fallbacks)
    if serving == "ours":  # problems no template of ours computes (the fp32 Linear's NT) go to torch
        fallbacks.pop(at.Fallback.RUNTIME.value, None)
        assert rep.count("autotune") > 0, rep
    assert fallbacks == {}, rep


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("terms", ["bias", "bias+relu", "bias+z+relu", "z"])
def test_the_epilogue_kernel_matches_torchs_ops(torch, dtype, channels_last, terms):
    from autotune.serve import elementwise

    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    dt = getattr(torch, dtype)
    y = torch.randn(3, 37, 9, 11, device="cuda", dtype=dt).to(memory_format=fmt)
    bias = torch.randn(37, device="cuda", dtype=dt) if "bias" in terms else None
    z = torch.randn_like(y) if "z" in terms else None
    want = y.float() + (bias.float().view(1, -1, 1, 1) if bias is not None else 0) + (z.float() if z is not None else 0)
    if "relu" in terms:
        want = want.relu()
    assert elementwise.conv_epilogue(y, bias, z, "relu" in terms, channels_last)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.float(), want, rtol=1e-3 if dtype == "float16" else 1e-6, atol=1e-3)
    assert not elementwise.conv_epilogue(
        y,
        bias,
        torch.randn(3, 37, 9, 11, device="cuda", dtype=dt).to(
            memory_format=torch.contiguous_format if channels_last else torch.channels_last
        ),
        True,
        channels_last,
    )


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(
    "shape, split", [((1, 64), True), ((5, 3, 48), True), ((7, 40), False), ((3, 2, 36), True), ((9, 13), False),
                     ((300, 1032), True)]
)  # fmt: skip
def test_the_silu_mul_kernel_matches_torch_on_column_slices(torch, dtype, shape, split):
    """Both forms: 16-byte packs where the columns and row strides are whole packs (fp16 and bf16: 8 elements,
    fp32: 4), an element a step where they are not (36 and 13 columns in 16-bit, 13 in fp32)."""
    from autotune.kernels import elementwise as ew
    from autotune.serve import elementwise

    torch.manual_seed(1)
    dt = getattr(torch, dtype)
    if split:  # a and b: the two halves of one merged output, rows 2 * cols apart
        a, b = torch.randn(*shape[:-1], 2 * shape[-1], device="cuda", dtype=dt).chunk(2, dim=-1)
    else:
        a, b = (torch.randn(shape, device="cuda", dtype=dt) for _ in range(2))
    out = elementwise.silu_mul(a, b)
    assert out is not None and out.is_contiguous() and out.shape == a.shape
    want = torch.nn.functional.silu(a.float()) * b.float()
    torch.testing.assert_close(out.float(), want, rtol={"float32": 1e-5}.get(dtype, 1e-2), atol=1e-2)
    assert elementwise.silu_mul(a, b.t() if b.dim() == 2 else b[..., ::2]) is None  # shapes or strides it refuses
    packed = shape[-1] % ew.vec(dtype) == 0
    assert (elementwise.silu_mul(a, b, packed_only=True) is not None) == packed


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_bias_rows_set_every_row_of_a_linear_output_to_the_bias(torch, rows):
    """The fast serve's start of a Linear output with a bias: device-to-device copies on torch's stream, eager and
    captured in a CUDA graph; where the runtime refuses a 2-D copy with source pitch 0 (rows > 1) it says so."""
    from autotune.measure import streams
    from autotune.serve.torch_backend import AutotuneBackend

    bias = torch.randn(300, device="cuda", dtype=torch.float16)
    out = torch.full((rows, 300), float("nan"), device="cuda", dtype=torch.float16)
    done = AutotuneBackend.bias_rows(out, bias, rows, streams.stream_of_torch(0))
    assert done or rows > 1  # one row is one plain copy
    if not done:
        return
    torch.cuda.synchronize()
    assert torch.equal(out, bias.expand_as(out))
    graph, out2 = torch.cuda.CUDAGraph(), torch.full_like(out, float("nan"))
    with torch.cuda.graph(graph):
        assert AutotuneBackend.bias_rows(out2, bias, rows, streams.stream_of_torch(0))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out2, bias.expand_as(out2))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_a_decoder_fx_cannot_trace_whole_runs_its_rewritten_mlps_on_the_gpu(torch, serving, dtype):
    """A decoder shaped like Hugging Face's (fx cannot trace it whole): its MLPs rewritten on their own (gate and
    up merged, silu(a)*b in one kernel) agree with torch's model against float64, eager and in a CUDA graph."""
    import autotune.torch as at
    from tests.unit.test_torch_fusion import hf_like

    base = hf_like().cuda()
    ref = copy.deepcopy(base).double()
    base = base.to(dtype=getattr(torch, dtype))
    opt = at.optimize(copy.deepcopy(base))
    assert "2 submodules rewritten on their own" in at.report(opt).fusion
    static_ids = torch.randint(0, 50, (3, 7), device="cuda")
    with torch.inference_mode():
        for _ in range(3):
            opt(static_ids)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = opt(static_ids)
        for seed in range(2):
            g = torch.Generator("cuda").manual_seed(seed)
            static_ids.copy_(torch.randint(0, 50, (3, 7), device="cuda", generator=g))
            graph.replay()
            want, theirs, eager = ref(static_ids), base(static_ids), opt(static_ids)
            torch.cuda.synchronize()
            for ours in (static_y, eager):
                err, torch_err = rel(torch, ours, want), rel(torch, theirs, want)
                assert err < max(TOLERANCE[dtype], 2 * torch_err), (seed, err, torch_err)
    merged = [layer for layer in at.report(opt).layers if layer.name.endswith("gate_proj_up_proj.merged")]
    assert len(merged) == 2 and all(sum(layer.calls.values()) == 3 + 1 + 2 * 1 for layer in merged), merged
