"""The drop-in's graph rewrite (autotune.serve.torch_fusion) with real torch on the CPU: BatchNorm folded into
convolutions, ReLUs and residual adds fused into them, and the fused modules routed through our kernels (torch
on the CPU standing in for them, tests/unit/test_torch_dropin.py's CPUBackend)."""

from __future__ import annotations

import pytest

from tests.unit.test_torch_dropin import CPUBackend

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional


def randomize_bn(model, gen):
    """BatchNorms with statistics and affine parameters far from the identity, so folding is visible."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen))
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) * 2 + 0.1)
                if m.weight is not None:
                    m.weight.copy_(torch.randn(m.num_features, generator=gen))
                    m.bias.copy_(torch.randn(m.num_features, generator=gen))
    return model


class Bottleneck(nn.Module):
    """torchvision's ResNet bottleneck, as it is written there: one ReLU module used three times, the
    shortcut's convolution computed after the main branch, and ``out += identity``."""

    def __init__(self, c: int, mid: int, k: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, k, 1, bias=False), nn.BatchNorm2d(k)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or c != k:
            self.downsample = nn.Sequential(nn.Conv2d(c, k, 1, stride, bias=False), nn.BatchNorm2d(k))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)  # a conv with its own bias
        self.blocks = nn.Sequential(Bottleneck(8, 4, 16, 2), Bottleneck(16, 4, 16, 1))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.blocks(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def net(seed=0):
    torch.manual_seed(seed)
    return randomize_bn(Net(), torch.Generator().manual_seed(seed)).eval()


def test_folding_a_batchnorm_gives_the_same_convolution():
    from autotune.serve.torch_fused import fold_batchnorm

    gen = torch.Generator().manual_seed(3)
    for bias in (False, True):
        conv = nn.Conv2d(6, 10, 3, stride=2, padding=1, bias=bias).double()
        bn = randomize_bn(nn.BatchNorm2d(10).double(), gen).eval()
        x = torch.randn(2, 6, 9, 9, dtype=torch.float64, generator=gen)
        folded = fold_batchnorm(conv, bn).eval()
        torch.testing.assert_close(folded(x), bn(conv(x)), rtol=1e-12, atol=1e-12)
        assert not folded.relu and not folded.residual and folded.stride == (2, 2)


def test_the_rewrite_folds_and_fuses_a_resnet_block_and_computes_the_same():
    from autotune.serve.torch_fused import FusedConv2d
    from autotune.serve.torch_fusion import fuse

    model = net()
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        want = model(x)
        fused, done = fuse(model)
        got = fused(x)
        assert torch.equal(model(x), want)  # the model passed in is unchanged: its BatchNorms still run
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # stem + 2 x (3 in the main branch) + 1 shortcut = 8 BatchNorms; ReLUs: stem, 2 x 2; residual: 2
    assert (done.folded_bn, done.relu, done.add_relu, done.skipped) == (8, 5, 2, "")
    kinds = sorted((m.relu, m.residual) for m in fused.modules() if isinstance(m, FusedConv2d))
    assert kinds == [(False, False)] + [(True, False)] * 5 + [(True, True)] * 2
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fused.modules())
    names = dict(fused.named_modules())  # the fused modules keep their convolutions' names
    assert names["blocks.0.conv3"].residual and names["blocks.0.conv1"].relu and names["stem"].relu
    assert type(model.blocks[0].conv3) is nn.Conv2d and isinstance(model.blocks[0].bn3, nn.BatchNorm2d)


def test_the_drop_in_routes_the_fused_convolutions_and_adds_the_residual_after_our_kernel():
    import autotune.torch as at

    model = net()
    x = torch.randn(2, 3, 12, 12)
    backend = CPUBackend()
    with torch.no_grad():
        want = model(x)
        opt = at.optimize(model, backend=backend)
        got = opt(x)
    assert opt is not model
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    rep = at.report(opt)
    assert rep.count("autotune") == 9 and rep.count("torch") == 0  # 8 convolutions and the Linear
    assert backend.served.count("NCHW") == 8 and "8 BatchNorm folded" in str(rep)


def test_a_model_fx_cannot_trace_is_served_unfused_and_says_why():
    import autotune.torch as at

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.bn(self.conv(x))
            return y.relu() if y.sum() > 0 else y  # data-dependent control flow

    model = randomize_bn(Branchy(), torch.Generator().manual_seed(1)).eval()
    x = torch.randn(1, 3, 6, 6)
    with torch.no_grad():
        want = model(x)
        opt = at.optimize(model, backend=CPUBackend())
        torch.testing.assert_close(opt(x), want)
    assert opt is model and "torch.fx cannot trace it" in at.report(opt).fusion


def test_a_model_in_training_mode_or_with_fuse_off_is_not_rewritten():
    import autotune.torch as at

    model = net().train()
    assert at.optimize(model, backend=CPUBackend()) is model
    assert "training mode" in at.report(model).fusion
    assert at.optimize(net(), backend=CPUBackend(), fuse=False) is not None


def test_a_convolution_whose_output_is_used_twice_keeps_its_batchnorm_and_relu():
    from autotune.serve.torch_fusion import fuse

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.conv(x)
            return F.relu(self.bn(y)) + y

    model = randomize_bn(Twice(), torch.Generator().manual_seed(2)).eval()
    x = torch.randn(1, 3, 6, 6)
    fused, done = fuse(model)
    assert fused is model and (done.folded_bn, done.relu, done.add_relu) == (0, 0, 0)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x))


def test_a_folded_convolution_refuses_to_train():
    from autotune.serve.torch_fusion import fuse

    fused, _ = fuse(net())
    fused.train()
    with pytest.raises(RuntimeError, match="BatchNorm folded"):
        fused(torch.randn(1, 3, 8, 8))


def test_a_subclass_of_conv2d_stays_a_module_call_and_is_routed():
    import autotune.torch as at

    class MyConv(nn.Conv2d):
        pass

    model = nn.Sequential(MyConv(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    randomize_bn(model, torch.Generator().manual_seed(4))
    x = torch.randn(1, 3, 7, 7)
    with torch.no_grad():
        want = model(x)
        opt = at.optimize(model, backend=CPUBackend())
        torch.testing.assert_close(opt(x), want, rtol=1e-5, atol=1e-5)
    rep = at.report(opt)
    assert rep.count("autotune") == 1 and "1 BatchNorm folded, 1 conv+ReLU" in rep.fusion


class Projections(nn.Module):
    """benchmarks/models.py's Llama layer in small: q, k, v read x; gate and up read h."""

    def __init__(self, hidden=16, kv=4, mlp=24):
        super().__init__()
        self.q_proj, self.o_proj = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
        self.k_proj, self.v_proj = nn.Linear(hidden, kv, bias=False), nn.Linear(hidden, kv, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(hidden, mlp, bias=False), nn.Linear(hidden, mlp, bias=False)
        self.down_proj = nn.Linear(mlp, hidden, bias=False)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        h = x + self.o_proj(q)
        h = h + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))
        return torch.cat([h, k, v], dim=-1)


@pytest.mark.parametrize("rows", [1, 3, 65])
def test_linears_reading_one_input_are_merged_into_one_without_a_second_copy_of_their_weights(rows):
    """Up to MERGE_MAX_ROWS rows the merged Linear runs and the outputs are its column slices; above, each Linear
    runs on its own (dense outputs for what follows)."""
    import autotune.torch as at
    from autotune.serve.torch_fused import MERGE_MAX_ROWS

    torch.manual_seed(5)
    model = Projections().eval()
    x = torch.randn(rows, 16)
    with torch.no_grad():
        want = model(x)
        backend = CPUBackend()
        opt = at.optimize(model, backend=backend)
        got = opt(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    rep = at.report(opt)
    assert "3 Linear merged" in rep.fusion
    names = dict(opt.named_modules())
    qkv, gate_up = names["q_proj_k_proj_v_proj.merged"], names["gate_proj_up_proj.merged"]
    assert qkv.out_features == 24 and gate_up.out_features == 48
    base = qkv.weight.untyped_storage().data_ptr()  # the originals are views of the merged weight
    assert model.k_proj.weight.untyped_storage().data_ptr() == base
    torch.testing.assert_close(model.k_proj.weight, qkv.weight[16:20])
    calls = {layer.name: layer.calls for layer in rep.layers}
    if rows <= MERGE_MAX_ROWS:
        # o_proj reads a column slice of q,k,v: a strided view; with one row it is dense and our kernel takes it
        assert calls["o_proj"] == ({"autotune": 1} if rows == 1 else {"torch": 1})
        assert calls["q_proj_k_proj_v_proj.merged"] == calls["down_proj"] == {"autotune": 1}
        assert calls["q_proj_k_proj_v_proj.parts.k_proj"] == {}
    else:
        assert calls["o_proj"] == calls["q_proj_k_proj_v_proj.parts.k_proj"] == {"autotune": 1}
        assert calls["q_proj_k_proj_v_proj.merged"] == {}


def test_linears_whose_output_is_reshaped_are_not_merged():
    from autotune.serve.torch_fusion import fuse

    class Viewed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 4)

        def forward(self, x):
            return self.a(x).view(-1) + self.b(x).view(-1)  # .view needs a dense tensor: a slice would fail

    model = Viewed().eval()
    fused, done = fuse(model)
    assert fused is model and done.merged_linear == 0


def test_silu_times_a_tensor_becomes_one_call_and_computes_the_same():
    from autotune.serve.torch_fused import silu_mul
    from autotune.serve.torch_fusion import fuse

    torch.manual_seed(6)
    model = Projections().eval()
    x = torch.randn(2, 16)
    with torch.no_grad():
        want = model(x)
        fused, done = fuse(model)
        torch.testing.assert_close(fused(x), want, rtol=1e-5, atol=1e-5)
    assert done.silu_mul == 1
    targets = [n.target for n in fused.graph.nodes if n.op == "call_function"]
    assert silu_mul in targets and F.silu not in targets

    class Module(nn.Module):  # nn.SiLU, the silu on the right, and one whose result is also used alone
        def __init__(self):
            super().__init__()
            self.act = nn.SiLU()

        def forward(self, x):
            kept = F.silu(x + 1)
            return x * self.act(x) + kept * x + kept

    model = Module().eval()
    fused, done = fuse(model)
    assert done.silu_mul == 1
    x = torch.randn(3, 5)
    torch.testing.assert_close(fused(x), model(x))


def test_a_fused_model_still_gives_gradients_for_its_input():
    """Inference is what the rewrite is for, but an input that needs grad (attribution, say) gets one: the fused
    modules fall back to torch's differentiable ops."""
    model = net()
    x = torch.randn(1, 3, 8, 8, requires_grad=True)
    want = torch.autograd.grad(model(x).sum(), x)[0]
    from autotune.serve.torch_fusion import fuse

    fused, _ = fuse(model)
    x2 = x.detach().clone().requires_grad_(True)
    got = torch.autograd.grad(fused(x2).sum(), x2)[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_a_folded_channels_last_filter_stays_channels_last():
    from autotune.serve.torch_fused import fold_batchnorm

    conv = nn.Conv2d(6, 10, 3).to(memory_format=torch.channels_last)
    bn = randomize_bn(nn.BatchNorm2d(10), torch.Generator().manual_seed(7)).eval()
    folded = fold_batchnorm(conv, bn)
    w = folded.weight
    assert w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
    x = torch.randn(1, 6, 9, 9).to(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.testing.assert_close(folded.eval()(x), bn(conv(x)), rtol=1e-5, atol=1e-5)


def hf_like():
    """A model shaped like a Hugging Face decoder: forwards of several inputs and a loop (so fx cannot trace the
    whole), a ModuleList of blocks, each with an attention of two inputs and an MLP of one (nn.SiLU as a module)."""

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(16, 40, bias=False), nn.Linear(16, 40, bias=False)
            self.down_proj, self.act_fn = nn.Linear(40, 16, bias=False), nn.SiLU()
            self.config = {"hidden": 16}  # an attribute a caller may read

        def forward(self, hidden_state):
            return self.down_proj(self.act_fn(self.gate_proj(hidden_state)) * self.up_proj(hidden_state))

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.o_proj = nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x, mask=None):
            q = self.q_proj(x)
            return self.o_proj(q if mask is None else q * mask)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.mlp, self.norm = Attention(), MLP(), nn.LayerNorm(16)

        def forward(self, x, mask=None):
            h = x + self.self_attn(self.norm(x), mask)
            assert self.mlp.config["hidden"] == h.shape[-1]  # the parent reads its child's attributes
            return h + self.mlp(hidden_state=self.norm(h))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.layers = nn.Embedding(50, 16), nn.ModuleList([Block(), Block()])

        def forward(self, ids, mask=None):
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x, mask)
            return x

    torch.manual_seed(0)
    return Decoder().eval()


def test_a_model_fx_cannot_trace_whole_has_its_traceable_submodules_rewritten_in_a_copy():
    import autotune.torch as at
    from autotune.serve.torch_fusion import fuse

    model = hf_like()
    ids = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        want = model(ids)
        fused, done = fuse(model)
        assert fused is not model and done.parts == 2 and done.merged_linear == 2 and done.silu_mul == 2
        assert "2 submodules rewritten on their own" in str(done) and "more than one input" in str(done)
        torch.testing.assert_close(fused(ids), want)
        mlp = fused.layers[0].mlp
        assert mlp is not model.layers[0].mlp and mlp.config == {"hidden": 16} and mlp.gate_proj is not None
        assert "forward" not in model.layers[0].mlp.__dict__ and model.layers[0] is not fused.layers[0]
        torch.testing.assert_close(model(ids), want)  # the model passed in computes as before, with its own forwards
        assert fused.layers[0].self_attn is model.layers[0].self_attn  # what was not rewritten is shared
        opt = at.optimize(hf_like(), backend=CPUBackend())
        torch.testing.assert_close(opt(ids), want)
    rep = at.report(opt)
    assert "2 submodules rewritten" in rep.fusion
    merged = [layer.name for layer in rep.layers if layer.name.endswith("gate_proj_up_proj.merged")]
    assert merged == ["layers.0.mlp.autotune_fused.gate_proj_up_proj.merged",
                      "layers.1.mlp.autotune_fused.gate_proj_up_proj.merged"]  # fmt: skip
    assert rep.count("autotune") == 2 * 4  # a block: q_proj, o_proj, gate and up merged into one call, down_proj


def test_a_model_with_nothing_traceable_inside_is_served_unfused_and_says_why():
    from autotune.serve.torch_fusion import fuse

    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x, y):
            return self.a(x) + self.b(y)

    model = TwoInputs().eval()
    fused, done = fuse(model)
    assert fused is model and "more than one input" in done.skipped and done.parts == 0
