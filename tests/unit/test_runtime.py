"""Runtime lookup chain, cubin cache invalidation and export, without a GPU."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

import pytest

from autotune.build.compiler import compile_source
from autotune.build.templates import fits_installed, installed_renders, render, template_hash
from autotune.kernels import FAMILIES
from autotune.results.export import export
from autotune.results.store import merge
from autotune.serve import calls, runtime
from autotune.serve.runtime import CubinCache, choose

F32 = FAMILIES["gemm"].problem("64x64x64", "float32")

GEMM = FAMILIES["gemm"]
H200, H100, A100 = "nvidia-h200-sm90", "nvidia-h100-sm90", "nvidia-a100-sm80"
BIG = dict(BM=128, BN=256, BK=16, WM=64, WN=64, WNITER=4, TM=8, TN=4, VEC=4, PAD=4, DBUF=True)
SMALL = dict(BM=64, BN=64, BK=16, WM=16, WN=64, WNITER=1, TM=4, TN=4, VEC=4, PAD=4, DBUF=True)


def entry(params, **extra):
    """A test-data entry (not a measurement): what store.merge would write after a verified run."""
    e = {"template": "simt", "params": params, "verified": True, "median_ms": 1.0,
         "template_hash": template_hash("gemm", "simt")}  # fmt: skip
    e.update(extra)
    return e


@pytest.fixture
def tuned(tmp_path: Path) -> Path:
    d = tmp_path / "tuned"
    merge(d / H200 / "gemm.json", {}, "float32/NN/4096x4096x4096", entry(BIG))
    merge(d / H200 / "gemm.json", {}, "float32/NN/16x4096x4096", entry(SMALL))
    merge(d / H100 / "gemm.json", {}, "float32/NN/2048x2048x2048", entry(SMALL))
    return d


def problem(label):
    return GEMM.problem(label, "float32")


@pytest.fixture(autouse=True)
def _not_capturing(monkeypatch):
    """No GPU here: CuPy cannot tell whether a stream captures, which the runtime reads as capturing."""
    monkeypatch.setattr("autotune.measure.streams.capturing", lambda: False)


def test_exact_entry_wins(tuned, caplog):
    with caplog.at_level(logging.DEBUG, logger="autotune.serve.runtime"):
        c = choose("gemm", problem("4096x4096x4096"), H200, "sm_90", tuned)
    assert c.step == "exact" and c.params == BIG and c.source == f"{H200} float32/NN/4096x4096x4096"
    assert "exact config" in caplog.text


def test_nearest_tuned_shape_on_the_same_gpu(tuned):
    assert choose("gemm", problem("3000x5000x700"), H200, "sm_90", tuned).params == BIG
    near_skinny = choose("gemm", problem("8x4096x4096"), H200, "sm_90", tuned)
    assert near_skinny.step == "nearest" and near_skinny.params == SMALL


def test_same_architecture_when_this_gpu_has_nothing(tuned):
    c = choose("gemm", problem("100x100x100"), "nvidia-gh200-sm90", "sm_90", tuned)
    assert c.step == "same-arch" and c.source == f"{H100} float32/NN/2048x2048x2048" and c.params == SMALL


def test_default_when_nothing_applies(tuned):
    c = choose("gemm", problem("100x100x100"), A100, "sm_80", tuned)
    assert c.step == "default" and (c.template, c.params) == GEMM.default_config("float32")


def test_entries_of_another_template_version_or_unverified_are_never_served(tmp_path, caplog):
    d = tmp_path / "tuned"
    merge(d / H200 / "gemm.json", {}, "float32/NN/64x64x64", entry(BIG, template_hash="0123456789abcdef"))
    path = d / H200 / "gemm.json"
    doc = json.loads(path.read_text())
    doc["entries"]["float32/NN/32x32x32"] = {**entry(SMALL), "verified": False}
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.DEBUG, logger="autotune.serve.runtime"):
        c = choose("gemm", problem("64x64x64"), H200, "sm_90", d)
    assert c.step == "default"
    assert "tuned with template 0123456789abcdef" in caplog.text


def test_an_entry_lacking_a_parameter_its_template_has_gained_is_skipped_not_a_crash(tmp_path, caplog):
    """A template that gains a parameter leaves older entries without it; serving, and deciding whether the
    installed template renders them, must pass over such an entry instead of raising KeyError."""
    d = tmp_path / "tuned"
    old = {k: v for k, v in SMALL.items() if k != "DBUF"}
    merge(d / H200 / "gemm.json", {}, "float32/NN/64x64x64", entry(old, template_hash="0123456789abcdef"))
    merge(d / H200 / "gemm.json", {}, "float32/NN/128x128x128", entry(BIG))
    with caplog.at_level(logging.DEBUG, logger="autotune.serve.runtime"):
        c = choose("gemm", problem("64x64x64"), H200, "sm_90", d)
    assert (c.step, c.params) == ("nearest", BIG)
    assert "do not fit the installed template" in caplog.text
    assert not installed_renders("gemm", entry(old), problem("64x64x64"))
    assert not fits_installed("gemm", "simt", old) and fits_installed("gemm", "simt", SMALL)


def test_an_entry_of_an_older_template_file_is_served_while_it_renders_the_same_kernel(tmp_path, caplog):
    """A template edit that leaves a stored kernel's source byte-identical (a new optional parameter, say)
    keeps the entry: its source_hash proves the tuned and verified kernel is the one that would run."""
    d = tmp_path / "tuned"
    same = render("gemm", "simt", BIG, problem("64x64x64")).source_hash
    merge(d / H200 / "gemm.json", {}, "float32/NN/64x64x64",
          entry(BIG, template_hash="0123456789abcdef", source_hash=same))  # fmt: skip
    merge(d / H200 / "gemm.json", {}, "float32/NN/16x16x16",
          entry(SMALL, template_hash="0123456789abcdef", source_hash="fedcba9876543210"))  # fmt: skip
    assert choose("gemm", problem("64x64x64"), H200, "sm_90", d).step == "exact"
    with caplog.at_level(logging.DEBUG, logger="autotune.serve.runtime"):
        c = choose("gemm", problem("16x16x16"), H200, "sm_90", d)
    assert (c.step, c.params) == ("nearest", BIG)  # the changed kernel is skipped, not served
    assert "tuned with template 0123456789abcdef" in caplog.text


def test_cubin_cache_hits_on_disk_and_misses_when_source_or_nvrtc_change(tmp_path, monkeypatch):
    r = render("gemm", "naive", dict(BX=16, BY=16), F32)
    first = CubinCache(tmp_path)
    assert first.get(r.source, r.source_hash, r.kernel_name, "sm_90").ok and first.compiles == 1
    second = CubinCache(tmp_path)  # a new process: the disk cache answers
    got = second.get(r.source, r.source_hash, r.kernel_name, "sm_90")
    assert second.compiles == 0 and got.cubin == compile_source(r.source, r.kernel_name, "sm_90").cubin
    # a template change renders another source: compiled again
    changed = render("gemm", "naive", dict(BX=32, BY=8), F32)
    second.get(changed.source, changed.source_hash, changed.kernel_name, "sm_90")
    assert second.compiles == 1
    # a new NVRTC gives another key for the same source
    monkeypatch.setattr(runtime, "nvrtc_version", lambda: "99.9")
    third = CubinCache(tmp_path)
    third.get(r.source, r.source_hash, r.kernel_name, "sm_90")
    assert third.compiles == 1
    assert len(list((tmp_path / "cubin").glob("*.cubin"))) == 3


def test_export_writes_a_header_that_compiles_and_sources_that_compile(tuned, tmp_path):
    out = tmp_path / "export"
    paths = export(tuned, out)
    header = out / "autotune_tuned.h"
    assert paths[0] == header and len(paths) == 1 + 3
    text = header.read_text()
    assert text.count('{"nvidia-') == 3 and "AUTOTUNE_TUNED_COUNT = 3u" in text
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        subprocess.run([cc, "-fsyntax-only", "-x", "c", str(header)], check=True)
    src = next(p for p in paths[1:] if "bm128_bn256" in p.name)
    assert compile_source(src.read_text(), src.stem, "sm_90").ok


def test_default_tuned_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(runtime.ENV_TUNED_DIR, str(tmp_path))
    assert runtime.default_tuned_dir() == tmp_path
    monkeypatch.delenv(runtime.ENV_TUNED_DIR)
    assert (runtime.default_tuned_dir() / H200 / "gemm.json").is_file()  # the results that ship with the package


def test_split_k_scratch_is_not_shared_between_streams(monkeypatch):
    """Split-K partial sums and tile counters belong to one stream: two threads calling gemm() on their own
    streams must not reduce into each other's partials or leave each other's counters off zero."""
    from autotune.kernels.base import Launch

    problem = GEMM.problem("16x4096x4096", "float16")
    params = dict(FRAG="m16n16k16", WARPS_M=2, WARPS_N=4, FRAGS_M=1, FRAGS_N=1, BK=64, PAD=8, STAGES=4, RASTER=1,
                  SPLIT_K=4)  # fmt: skip
    made, launched = [], []

    def new_scratch():
        made.append((object(), object()))
        return made[-1]

    def fn(grid, block, args, shared_mem):
        launched.append(args[-2:])

    choice = runtime.Choice("wmma", params, "exact", "test")
    launcher = runtime.Launcher("gemm", problem, choice, fn, Launch((64, 1, 4), (256, 1, 1), 0), "k", new_scratch)
    stream, capture = ["first"], [False]
    monkeypatch.setattr("autotune.serve.launcher._stream_key", lambda: stream[0])
    monkeypatch.setattr("autotune.measure.streams.capturing", lambda: capture[0])
    launcher(None, None, None)
    launcher(None, None, None)
    stream[0] = "second"
    launcher(None, None, None)
    assert launched[0] == launched[1] == made[0]  # one stream: launches are ordered, its buffers are reused
    assert launched[2] == made[1] and made[1] != made[0]
    stream[0], capture[0] = "graph capture", True  # nothing may be allocated: a warmed-up stream's buffers serve
    launcher(None, None, None)
    assert launched[3] == made[0] and len(made) == 2


def test_templates_without_scratch_launch_without_it(monkeypatch):
    from autotune.kernels.base import Launch

    launched = []

    def fn(grid, block, args, shared_mem):
        launched.append(args)

    choice = runtime.Choice("simt", SMALL, "exact", "test")
    launcher = runtime.Launcher("gemm", problem("64x64x64"), choice, fn, Launch((1, 1, 1), (128, 1, 1), 0), "k")
    monkeypatch.setattr("autotune.serve.launcher._stream_key", lambda: pytest.fail("no scratch, no stream lookup"))
    launcher("a", "b", "c")
    assert len(launched[0]) == 8 and launched[0][:3] == ("a", "b", "c")


def test_host_arrays_get_one_sentence_before_any_gpu_work():
    import numpy as np

    for bad in (np.ones((4, 4), np.float32),):
        with pytest.raises(TypeError, match="NumPy array in host memory"):
            calls.gemm(bad, bad)
    with pytest.raises(TypeError, match="must be a CuPy array"):
        calls.gemm([[1.0]], [[1.0]])


MMA = dict(BM=128, BN=256, BK=64, WM=64, WN=64, STAGES=3, SWIZZLE=True, RASTER=8)


def test_every_stored_winner_is_what_the_installed_templates_render():
    """The shipped tuned/ entries stay served: each one's source, rendered by today's templates for its own
    problem, is byte-identical to the one it was tuned with (a template edit must not change it)."""
    from autotune.build.templates import installed_renders

    checked = 0
    for path in sorted(runtime.default_tuned_dir().glob("*/*.json")):
        family = FAMILIES[path.stem]
        for key, e in json.loads(path.read_text())["entries"].items():
            dtype, layout, label = key.split("/")
            p = family.problem(label, dtype, layout)
            assert render(path.stem, e["template"], e["params"], p).source_hash == e["source_hash"], key
            assert installed_renders(path.stem, e, p), key
            checked += 1
    assert checked >= 20


def test_an_entry_whose_template_changed_is_served_while_its_source_is_unchanged(tmp_path, caplog):
    p = GEMM.problem("4096x4096x4096", "float16")
    same = {"template": "mma", "params": MMA, "verified": True, "median_ms": 0.3, "template_hash": "0ld0ld0ld0ld0ld0",
            "source_hash": render("gemm", "mma", MMA, p).source_hash}  # fmt: skip
    d = tmp_path / "tuned"
    merge(d / H200 / "gemm.json", {}, "float16/NN/4096x4096x4096", same)
    assert choose("gemm", p, H200, "sm_90", d).step == "exact"
    text = export(d, tmp_path / "out")[1].read_text()
    assert "tuned with an older template" not in text.splitlines()[0]
    merge(d / H200 / "gemm.json", {}, "float16/NN/4096x4096x4096", {**same, "source_hash": "another"}, force=True)
    with caplog.at_level(logging.DEBUG, logger="autotune.serve.runtime"):
        assert choose("gemm", p, H200, "sm_90", d).step == "default"
    assert "installed is" in caplog.text and "renders another source" in caplog.text
    text = export(d, tmp_path / "out2")[1].read_text()
    assert "tuned with an older template" in text.splitlines()[0]


def test_export_of_a_packed_mma_entry_names_both_pack_steps(tmp_path):
    p = GEMM.problem("4095x4097x4093", "float16")
    r = render("gemm", "mma", MMA, p)
    e = {"template": "mma", "params": MMA, "verified": True, "median_ms": 0.4,
         "template_hash": template_hash("gemm", "mma"), "source_hash": r.source_hash}  # fmt: skip
    merge(tmp_path / "tuned" / H200 / "gemm.json", {}, f"float16/NN/{p.label}", e)
    header, src = export(tmp_path / "tuned", tmp_path / "out")
    steps = GEMM.launch("mma", MMA, p).before
    row = next(line for line in header.read_text().splitlines() if p.label in line)
    before = ";".join(f"{s.kernel_name} {s.grid[0]} {s.grid[1]} 1 256 0" for s in steps)
    assert len(steps) == 2 and f'"{before}"' in row and "_uab_" in row
    text = " ".join(header.read_text().split())  # the header wraps the template's ABI text
    assert "<kernel_name>_pack` (const T* src, T* dst, int rows, int cols, int ld)" in text
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        subprocess.run([cc, "-fsyntax-only", "-x", "c", str(header)], check=True)
    assert f"{r.kernel_name}_pack(" in src.read_text() and src.stem == r.kernel_name


def test_a_packed_gemm_runs_its_pack_steps_then_the_gemm_on_the_copies(monkeypatch):
    p = GEMM.problem("37x45x29", "bfloat16", "NT")  # lda = ldb = K = 29: both packed
    launch = GEMM.launch("mma", MMA, p)
    log, made = [], []

    class Fn:
        def __init__(self, name):
            self.name = name

        def __call__(self, grid, block, args, shared_mem):
            log.append((self.name, grid, args))

    def new_scratch():
        made.append(("partial", "counters", f"packed A {len(made)}", f"packed B {len(made)}"))
        return made[-1]

    steps = tuple((Fn(f"pack {i}"), s) for i, s in enumerate(launch.before))
    choice = runtime.Choice("mma", MMA, "exact", "test")
    launcher = runtime.StagedLauncher("gemm", p, choice, Fn("gemm"), launch, "k", new_scratch, steps)
    stream = ["s1"]
    monkeypatch.setattr("autotune.serve.launcher._stream_key", lambda: stream[0])
    launcher("a", "b", "c", 2.0, 0.5)
    stream[0] = "s2"
    launcher("a", "b", "c")
    assert [e[0] for e in log] == ["pack 0", "pack 1", "gemm"] * 2 and len(made) == 2  # scratch per stream
    assert log[0][2] == ("a", "packed A 0", 37, 29, 32) and log[1][2] == ("b", "packed B 0", 45, 29, 32)
    assert log[2][2][:8] == ("packed A 0", "packed B 0", "c", 37, 45, 29, 2.0, 0.5)
    assert log[5][2][:2] == ("packed A 1", "packed B 1") and log[2][1] == launch.grid


def test_a_winograd_mma_entry_is_not_served_nearest_to_a_layer_deeper_than_its_measured_accuracy(tmp_path):
    """MMA's error grows with C; conv_winograd refuses C above MMA_MAX_C, so the lookup passes the MMA entry over
    for such a layer and serves the next nearest one (and serves the MMA entry where C is within the bound)."""
    conv = FAMILIES["conv2d"]
    d = tmp_path / "tuned"
    mma = dict(TILES=24, KB=16, CB=16, KT=4, TT=4, ET=1, SPAD=0, PIPE=1, MINB=1, DEPTH=2, ROUNDS=1, WSTAGE=1, MMA=1)
    fma = dict(TILES=32, KB=16, CB=8, KT=8, TT=4, ET=1, SPAD=8, PIPE=1, MINB=1)
    for label, params in (("n1c64h56w56k64r3s3u1p1", mma), ("n1c256h14w14k256r3s3u1p1", fma)):
        p = conv.problem(label, "float32", "NCHW")
        e = {"template": "winograd", "params": params, "verified": True, "median_ms": 0.013,
             "template_hash": template_hash("conv2d", "winograd"),
             "source_hash": render("conv2d", "winograd", params, p).source_hash}  # fmt: skip
        merge(d / H200 / "conv2d.json", {}, f"float32/NCHW/{label}", e)
    near = choose("conv2d", conv.problem("n1c128h56w56k64r3s3u1p1", "float32", "NCHW"), H200, "sm_90", d)
    assert (near.step, near.params.get("MMA")) == ("nearest", 1)
    deep = choose("conv2d", conv.problem("n1c1024h56w56k64r3s3u1p1", "float32", "NCHW"), H200, "sm_90", d)
    assert deep.step == "nearest" and "MMA" not in deep.params and deep.source.endswith("n1c256h14w14k256r3s3u1p1")


def test_an_entry_missing_a_parameter_its_checks_never_read_does_not_fit():
    """skinny_wgmma gained TMA, which its checks do not read: an entry stored before it is a misfit (passed over,
    tuned again), not a KeyError when its kernel is named or rendered."""
    before = dict(WG=2, MB=64, KC=32, STAGES=6, ROUND=256, SPLIT_K=4, CLUSTER=False, MINB=1)
    assert not fits_installed("gemm", "skinny_wgmma", before)
    assert fits_installed("gemm", "skinny_wgmma", {**before, "TMA": True})
    entry = {"template": "skinny_wgmma", "params": before, "source_hash": "0123456789abcdef"}
    assert not installed_renders("gemm", entry, problem("64x4096x4096"))


def test_a_tma_kernel_gets_the_maps_of_each_calls_operands(monkeypatch):
    """skinny_wgmma's launcher passes, after the split-K buffers, the tensor maps of the A and B of this call."""
    from types import SimpleNamespace

    from autotune.kernels.base import Launch
    from autotune.kernels.gemm_skinny_wgmma import TensorMaps

    params = dict(WG=2, MB=64, KC=32, STAGES=5, ROUND=256, SPLIT_K=4, CLUSTER=False, MINB=1, TMA=True)
    launched, bound = [], []

    class Maps(TensorMaps):
        def bind(self, a, b):
            bound.append((a, b))
            return f"map of {a.data.ptr}", f"map of {b.data.ptr}"

    prob = problem("64x4096x4096")
    scratch = ("partial", "counters", Maps(params, prob))
    choice = runtime.Choice("skinny_wgmma", params, "exact", "test")
    launcher = runtime.Launcher("gemm", prob, choice, lambda g, b, args, shared_mem: launched.append(args),
                                Launch((1, 32, 4), (256, 1, 1), 0), "k", lambda: scratch)  # fmt: skip
    monkeypatch.setattr("autotune.serve.launcher._stream_key", lambda: "s")
    for ptr in (16, 32):
        a, b = SimpleNamespace(data=SimpleNamespace(ptr=ptr + 1)), SimpleNamespace(data=SimpleNamespace(ptr=ptr))
        launcher(a, b, "c")
        assert launched[-1][:3] == (a, b, "c") and len(launched[-1]) == 12
        assert launched[-1][8:] == ("partial", "counters", f"map of {ptr + 1}", f"map of {ptr}")
    assert len(bound) == 2
