"""The command line: help, compile-only without a GPU, one-sentence errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import main

ROOT = Path(__file__).resolve().parents[2]
GEMM = str(ROOT / "configs" / "gemm.yaml")


def has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def test_help_teaches(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for word in ("--compile-only", "--storage", "--trials", "examples:", "resumes"):
        assert word in out


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "run" in capsys.readouterr().out


def test_compile_only_reports_resources_without_a_gpu(capsys):
    code = main(["run", GEMM, "--compile-only", "--arch", "sm_90", "--limit", "3", "--jobs", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = [ln for ln in captured.out.splitlines() if ln.strip().startswith("gemm_")]
    assert len(rows) == 3
    assert "registers" in captured.out and "spills" in captured.out
    assert "3 compiled, 0 failed" in captured.err


def test_compile_only_samples_a_large_space_without_rendering_all_of_it(capsys):
    """configs/conv_b1.yaml has 4.4 million configurations: --limit samples them by seeded random walks."""
    spec = str(ROOT / "configs" / "conv_b1.yaml")
    code = main(["run", spec, "--compile-only", "--arch", "sm_90", "--limit", "2", "--jobs", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "2 valid sources sampled" in captured.err and "2 compiled, 0 failed" in captured.err
    rows = [ln for ln in captured.out.splitlines() if ln.strip().startswith("conv2d_winograd_")]
    assert len(rows) == 2


def test_compile_only_of_a_huge_space_without_limit_says_to_sample(capsys):
    assert main(["run", str(ROOT / "configs" / "conv_b1.yaml"), "--compile-only", "--arch", "sm_90"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--limit N" in err[0] and "4,354,560 configurations" in err[0], err


def test_compile_only_with_a_bad_arch_is_one_clear_error(capsys):
    assert main(["run", GEMM, "--compile-only", "--arch", "hopper", "--limit", "1"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("autotune: error:") and "sm_90" in err[0]


def test_unknown_shape_is_named(capsys):
    assert main(["run", GEMM, "--shape", "3x3x3", "--compile-only", "--arch", "sm_90"]) != 0
    err = capsys.readouterr().err
    assert "3x3x3" in err and "Traceback" not in err


@pytest.mark.skipif(has_gpu(), reason="checks the behaviour on a machine without a GPU")
def test_tuning_without_a_gpu_is_one_clear_sentence(tmp_path, capsys):
    code = main(["run", GEMM, "--tuned-dir", str(tmp_path / "tuned"), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and err[0].startswith("autotune: error:") and "GPU" in err[0] and "--compile-only" in err[0]
    assert not (tmp_path / "tuned").exists()


def test_import_is_light_and_module_entry_point_works():
    code = "import sys, autotune; assert 'cupy' not in sys.modules and 'optuna' not in sys.modules, sys.modules.keys()"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "autotune", "--help"], check=True, cwd=ROOT, capture_output=True, text=True
    )
    assert "Tune parameterized CUDA kernels" in out.stdout
    assert all(f"\n    {cmd} " in out.stdout for cmd in ("run", "ladder", "export", "report", "compare"))


def test_compile_only_compiles_every_dtype_and_layout_of_the_spec(tmp_path, capsys):
    """The source depends on the dtype and layout: each one the spec tunes is compiled, not only the first."""
    spec = tmp_path / "variants.yaml"
    spec.write_text(
        "kernel: gemm\ntemplate: auto\ndtype: [float32, float16]\nlayout: [NN, TN]\nshapes: [[1, 4096, 4096]]\n"
        "params:\n  TEMPLATE: [skinny]\n"
        + "".join(f"  {k}: {{values: [{v}], when: \"TEMPLATE == 'skinny'\"}}\n" for k, v in
                  dict(VEC=4, TX=32, TY=8, MT=1, KR=4, SPLIT_K=1, PREFETCH="true", MINB=2).items())
    )  # fmt: skip
    code = main(["run", str(spec), "--compile-only", "--arch", "sm_90", "--jobs", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    names = {ln.split()[0] for ln in captured.out.splitlines() if ln.strip().startswith("gemm_skinny_")}
    assert {n.split("_vec")[0] for n in names} == {f"gemm_skinny_{d}_{lay}" for d in ("f32", "f16")
                                                   for lay in ("nn", "tn")}  # fmt: skip
