"""autotune export: bad entries skipped with one warning, and every exported source builds with its own nvcc line."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autotune.build.templates import render, template_hash
from autotune.kernels import FAMILIES
from autotune.results.export import build_line, export, source_file
from tests.sweep import full_sweep

# the templates whose exported sources the CPU tier builds with nvcc (~2.7 s each): an sm_90a GEMM calling host-pass
# hooks, a generic GEMM with pack kernels before it, a convolution calling hooks; the full sweep builds every template
BUILT_IN_CPU_TIER = ("skinny_wgmma", "mma", "winograd")

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia-h200-sm90"
SIMT = dict(BM=64, BN=64, BK=16, WM=16, WN=64, WNITER=1, TM=4, TN=4, VEC=4, PAD=4, DBUF=True)


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    for candidate in (os.environ.get("CUDA_HOME", "") + "/bin/nvcc", "/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if not found and os.access(candidate, os.X_OK):
            found = candidate
    return found


def _documented_build(src: Path) -> list[str]:
    """The build command an exported source documents on its second line."""
    line = src.read_text().splitlines()[1]
    assert line.startswith("// build: nvcc -c "), line
    return shlex.split(line.removeprefix("// build: ").split("   (")[0])


def _one_per_template(out: Path) -> dict[tuple[str, str], Path]:
    """For each (kernel, template) of the committed tuned/, the exported source with the most host-pass guards."""
    picked: dict[tuple[str, str], Path] = {}
    for path in sorted((ROOT / "tuned").glob("*/*.json")):
        for key, e in json.loads(path.read_text())["entries"].items():
            src = out / path.parent.name / f"{e['kernel_name']}.cu"
            assert src.is_file(), (path, key)
            best = picked.get((path.stem, e["template"]))
            if best is None or _guards(src) > _guards(best):
                picked[(path.stem, e["template"])] = src
    return picked


def _guards(src: Path) -> int:
    return sum(
        line.startswith(("#define __CUDA_ARCH_FEAT", "template <int... I")) for line in src.read_text().splitlines()
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export")
    export(ROOT / "tuned", out)
    return out


def test_every_committed_entry_is_exported_with_its_rendered_source_unchanged(exported):
    checked = 0
    for path in sorted((ROOT / "tuned").glob("*/*.json")):
        family = FAMILIES[path.stem]
        for key, e in json.loads(path.read_text())["entries"].items():
            dtype, layout, label = key.split("/")
            rendered = render(path.stem, e["template"], e["params"], family.problem(label, dtype, layout))
            text = (exported / path.parent.name / f"{rendered.kernel_name}.cu").read_text()
            assert rendered.source in text and rendered.source_hash == e["source_hash"], key
            assert "#define AUTOTUNE_HOST_EMULATION" not in text  # the test emulation stays out
            checked += 1
    assert checked >= 30
    header = (exported / "autotune_tuned.h").read_text()
    assert "nvcc -c -arch=<arch> -std=c++17" in header and '"sm_90a"}' in header and '"sm_90"}' in header


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed")
def test_one_exported_source_per_template_builds_with_its_documented_nvcc_line(exported, tmp_path):
    picked = _one_per_template(exported)
    want = {
        "mma",
        "wgmma_decode",
        "skinny",
        "skinny_wgmma",
        "wgmma_tf32x3",
        "winograd",
        "implicit_mma",
        "implicit_wmma",
    }  # the stored winners' templates (no GEMM winner is wmma's any more)
    assert {t for _, t in picked} >= want
    if not full_sweep():
        picked = {key: src for key, src in picked.items() if key[1] in BUILT_IN_CPU_TIER}
        assert {t for _, t in picked} == set(BUILT_IN_CPU_TIER)
    texts = [p.read_text() for p in picked.values()]
    assert any("void host_" in t for t in texts) and any("#define __CUDA_ARCH_FEAT_SM90_ALL" in t for t in texts)
    nvcc = _nvcc()

    def build(src: Path) -> tuple[Path, subprocess.CompletedProcess]:
        cmd = _documented_build(src)
        cmd[0] = nvcc
        run = subprocess.run([*cmd, "-o", str(tmp_path / f"{src.stem}.o")], cwd=src.parent, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
        return src, run

    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        results = list(pool.map(build, picked.values()))
    failed = {src.name: run.stderr[-2000:] for src, run in results if run.returncode != 0}
    assert not failed, failed
    assert all((tmp_path / f"{src.stem}.o").stat().st_size > 0 for src, _ in results)


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed")
def test_an_sm90a_source_still_refuses_a_generic_target(exported, tmp_path):
    """The guards are for nvcc's host pass only: building a wgmma source for plain sm_90 stays a compile error."""
    src = next(p for (_, t), p in _one_per_template(exported).items() if t == "skinny_wgmma")
    run = subprocess.run([_nvcc(), "-c", "-arch=sm_90", "-std=c++17", src.name, "-o", str(tmp_path / "x.o")],
                         cwd=src.parent, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode != 0 and "needs sm_90a" in run.stderr


def test_build_lines_name_the_arch_and_an_arch_specific_target_by_its_virtual_arch():
    assert build_line("sm_80", "k.cu") == "nvcc -c -arch=sm_80 -std=c++17 k.cu"
    assert build_line("sm_90a", "k.cu") == "nvcc -c -arch=compute_90a -code=sm_90a -std=c++17 k.cu"
    assert "<your GPU's sm_XX>" in build_line(None, "k.cu")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", None])
def test_an_exported_file_holds_the_source_unchanged_with_balanced_guards(arch):
    source = "// k\n#if X\n#error x\n#endif\n__device__ void f() {\n#ifdef __CUDA_ARCH__\n#else\n"
    source += "  host_foo<4>(x);\n  host_bar (y);\n#endif\n}"
    text = source_file(source, "k.cu", arch)
    assert source + "\n" in text
    assert text.count("#if") == text.count("#endif")
    assert "void host_bar(A&&...);" in text and "void host_foo(A&&...);" in text
    assert ("__CUDA_ARCH_FEAT_SM90_ALL" in text) == (arch == "sm_90a")


def _write(path: Path, entries: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 2, "entries": entries, "gpu": {"arch": "sm_90", "key": GPU}}))


def test_entries_that_cannot_be_exported_are_skipped_with_one_warning_each(tmp_path, caplog):
    good = {"template": "simt", "params": SIMT, "verified": True, "median_ms": 1.0,
            "template_hash": template_hash("gemm", "simt")}  # fmt: skip
    bad = {
        "float32/NN/1x1x1": {k: v for k, v in good.items() if k != "template"},
        "float32/NN/2x2x2": {**good, "params": "garbage"},
        "float32/NN/3x3x3": {**good, "params": {**SIMT, "BM": 3}},
        "float32/NN/4x4x4": {**good, "params": {"BM": 64}},
        "float32/NN/5x5x5": {**good, "template": "nope"},
        "float32/NN/6x6x6": {**good, "params": {**SIMT, "BM": "sixty-four"}},
        "float32/NN/axbxc": good,
    }
    path = tmp_path / "tuned" / GPU / "gemm.json"
    _write(path, {**bad, "float32/NN/64x64x64": good})
    with caplog.at_level(logging.WARNING):
        written = export(tmp_path / "tuned", tmp_path / "out")
    assert len(written) == 2 and "AUTOTUNE_TUNED_COUNT = 1u" in written[0].read_text()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for key in bad:
        assert sum(repr(key) in m and str(path) in m for m in messages) == 1, (key, messages)
    assert len(messages) == len(bad)


def test_the_cli_reports_an_unreadable_tuned_file_in_one_line(tmp_path):
    path = tmp_path / "tuned" / GPU / "gemm.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    run = subprocess.run([sys.executable, "-m", "autotune", "export", "--tuned-dir", str(tmp_path / "tuned"), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert run.stderr.strip().count("\n") == 0 and str(path) in run.stderr and "not a text file" in run.stderr
