"""What serving and tuning ask a family instead of comparing its name: the problem ``load()``'s sizes name, the
default spec files, and the vendor library (its name per dtype, and its torch call, run here on CPU tensors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.kernels.conv import CONV
from autotune.kernels.gemm import GEMM

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_load_sizes_name_the_familys_problem():
    assert GEMM.load_problem({"M": 4, "N": 5, "K": 6}, "float16", "NT") == GEMM.problem([4, 5, 6], "float16", "NT")
    with pytest.raises(ValueError, match="needs M, N and K, got M, N"):
        GEMM.load_problem({"M": 4, "N": 5}, "float32", "NN")
    sizes = dict(N=1, C=3, H=8, W=8, K=4, R=3, S=3, stride=1, pad=1)
    assert CONV.load_problem(sizes, "float32", "NHWC") == CONV.problem(sizes, "float32", "NHWC")


def test_every_default_spec_file_exists_and_small_m_nt_gemms_try_the_decode_space_first():
    cases = [(GEMM, GEMM.problem([m, 256, 512], d, lay)) for m in (1, 64, 65, 4096)
             for d in ("float32", "float16", "bfloat16") for lay in GEMM.layouts]  # fmt: skip
    cases += [(CONV, CONV.problem("n1c8h8w8k8r3s3u1p1", d, x)) for d in ("float32", "float16") for x in CONV.layouts]
    for family, p in cases:
        files = family.spec_files(p)
        assert files and len(set(files)) == len(files), p
        assert all((CONFIGS / f).is_file() for f in files), (p, files)
    small, big = (GEMM.spec_files(GEMM.problem([m, 256, 512], "float16", "NT")) for m in (8, 4096))
    assert small[0] == "gemm_decode_nt.yaml" and len(small) > len(big) > 0 and "gemm_decode_nt.yaml" not in big
    assert "gemm_decode_nt.yaml" not in GEMM.spec_files(GEMM.problem([8, 256, 512], "float16", "NN"))


def test_the_vendor_library_per_dtype_asks_about_torch_only_where_it_goes_through_torch():
    def no_question():
        raise AssertionError("torch_ok asked for a CuPy path")

    assert GEMM.vendor_library("float32", no_question)[0] and GEMM.vendor_library("tfloat32", no_question)[0]
    for family, dtype in ((GEMM, "bfloat16"), (CONV, "float32")):
        assert family.vendor_library(dtype, lambda: True)[0] is not None
        name, why = family.vendor_library(dtype, lambda: False)
        assert name is None and "no torch with CUDA" in why


def test_the_vendor_torch_calls_compute_their_problem_and_restore_tf32():
    torch = pytest.importorskip("torch")
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    before = (matmul.allow_tf32, cudnn.allow_tf32)
    p = GEMM.problem([5, 7, 3], "float32")
    a, b, out = torch.randn(5, 3), torch.randn(3, 7), torch.randn(5, 7)
    expected = 2.0 * (a.double() @ b.double()) + 0.5 * out.double()
    GEMM.vendor_torch_call(p)(a, b, out, 2.0, 0.5)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    c = CONV.problem("n2c3h9w9k4r3s3u2p1", "float32", "NHWC")
    x, w = torch.randn(c.N, c.C, c.H, c.W), torch.randn(c.K, c.C, c.R, c.S)
    y = CONV.vendor_torch_call(c)(x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1))  # stored NHWC, result NHWC
    ref = torch.nn.functional.conv2d(x.double(), w.double(), stride=c.stride, padding=c.pad).permute(0, 2, 3, 1)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
    assert (matmul.allow_tf32, cudnn.allow_tf32) == before
