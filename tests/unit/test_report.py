"""Reports on a recorded H200 run (tests/data): trials, best, compare, the HTML page, the CLI, a browser.

tests/data/recorded.journal is a subset of a real run's journal (see tests/data/record.py); the "shorter
run" used by compare tests is cut from it here, never invented.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import io
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pandas as pd
import pytest

from autotune import report
from autotune.cli import main
from autotune.core.errors import AutotuneError

DATA = Path(__file__).resolve().parents[1] / "data"
JOURNAL = DATA / "recorded.journal"
TUNED = DATA / "tuned"
STUDIES = ("gemm.simt.float32.4096x4096x4096.34107aaa", "gemm.simt.float32.16x4096x4096.34107aaa")
SIMT = ["BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "VEC", "PAD", "DBUF"]
PLOTS_WITH_TUNED = 7  # outcomes, progress, importance, parameters x 2 studies, roofline, speedup vs cuBLAS
# Ceilings given to the report in these tests: round test inputs, not any GPU's figures (a report carries none).
GIVEN = {"flops": 50e12, "bandwidth": 2e12}


def journal_trials(path: Path) -> dict[str, list]:
    """Every trial per study, read with Optuna itself (from a copy: the backend wants to write a lock)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "j.journal"
        shutil.copyfile(path, copy)
        storage = JournalStorage(JournalFileBackend(str(copy)))
        ids = {s.study_name: storage.get_study_id_from_name(s.study_name) for s in storage.get_all_studies()}
        return {name: storage.get_all_trials(i) for name, i in ids.items()}


def record(dest: Path, first: int) -> Path:
    """The first ``first`` trials per study of the recorded run: a shorter run, for compare tests."""
    spec = importlib.util.spec_from_file_location("record", DATA / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.record(JOURNAL, dest, first=first)
    return dest


@pytest.fixture(scope="module")
def df():
    return report.trials(JOURNAL, tuned_dir=TUNED)


@pytest.fixture(scope="module")
def cli_made(tmp_path_factory):
    """``autotune report`` with the tuned dir, run once for the tests of the command and of the report it writes
    (a report costs seconds): its exit code, what it printed, the Report that write_report gave it, the folder."""
    from autotune.report import commands

    out, reports = tmp_path_factory.mktemp("report") / "r", []

    def keep(*args, **kwargs):
        reports.append(write(*args, **kwargs))
        return reports[-1]

    write = commands.write_report
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()) as printed:
        mp.setattr(commands, "write_report", keep)
        code = main(["report", str(JOURNAL), "--tuned-dir", str(TUNED), "--out", str(out)])
    assert len(reports) == 1
    return code, printed.getvalue(), reports[0], out


@pytest.fixture(scope="module")
def made(cli_made):
    _, _, rep, out = cli_made
    return rep, out


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """The report of the first 4 trials of each study (too few for parameter importance) without a tuned dir and
    without a measured ceiling (written from a folder with no benchmarks/results/), and its folder: three tests read
    it, one for each thing it lacks, and a report costs seconds."""
    here = tmp_path_factory.mktemp("bare")
    short = record(here / "recorded.journal", first=4)  # named as the whole run: the same GPU key, "recorded"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(here)
        return report.write_report(short, here / "out"), here / "out"


def png_image(data: bytes) -> tuple[int, int, bytes]:
    """Check a PNG's structure (signature, chunk CRCs, IHDR, zlib data size); width, height, raw rows."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND" and b"IDAT" in chunks
    raw = zlib.decompress(idat)
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    assert len(raw) == height * (1 + math.ceil(width * channels * depth / 8))
    return width, height, raw


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(d) for d in re.findall(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


# --- trials() -----------------------------------------------------------------------------------------


def test_one_row_per_non_duplicate_trial_with_the_journals_statuses(df):
    stored = journal_trials(JOURNAL)
    assert set(df["study"]) == set(stored) == set(STUDIES)
    for name, ts in stored.items():
        kept = [t for t in ts if "duplicate_of" not in t.user_attrs]
        rows = df[df["study"] == name]
        assert len(rows) == len(kept)
        assert rows["trial"].tolist() == [t.number for t in kept]
        assert rows["status"].tolist() == [t.user_attrs["status"] for t in kept]
        complete = [t for t in kept if t.user_attrs["status"] == "complete"]
        assert rows.loc[rows["status"] == "complete", "median_ms"].tolist() == [t.value for t in complete]
    assert set(df["status"]) == {"complete", "pruned", "invalid"}
    assert (df.loc[df["status"] == "invalid", "reason"].str.len() > 0).all()


def test_columns_parse_the_study_name_and_hold_every_parameter(df):
    assert report.param_columns(df) == SIMT
    first = df[df["study"] == STUDIES[1]].iloc[0]
    parsed = (first["kernel"], first["template"], first["dtype"], first["shape"])
    assert parsed == ("gemm", "simt", "float32", "16x4096x4096")
    assert first["template_hash"] == "34107aaa" and pd.isna(first["space_digest"])  # recorded before space digests
    # the problem's own work, from its family: 2MNK FLOPs, A and B read and C written once (float32)
    assert (first["flops"], first["bytes"]) == (2 * 16 * 4096 * 4096, (16 * 4096 + 4096 * 4096 + 16 * 4096) * 4)
    for column in ("spread", "gbps", "compile_s", "registers", "shared_bytes", "spills", "occupancy", "datetime_start",
                   "datetime_complete", "elapsed_s", "owner"):  # fmt: skip
        assert column in df.columns
    assert df["energy_j"].isna().all()  # not measured yet
    done = df[df["status"] == "complete"]
    assert (done["datetime_complete"] >= done["datetime_start"]).all() and (done["elapsed_s"] > 0).all()
    assert ((done["spread"] - done["iqr_ms"] / done["median_ms"]).abs() < 1e-12).all()


def test_roofline_fraction_uses_the_shapes_intensity_and_the_ceilings():
    df = report.trials(JOURNAL, ceilings=GIVEN)
    done = df[df["status"] == "complete"]
    big = done[done["shape"] == "4096x4096x4096"].iloc[0]
    assert big["intensity"] == pytest.approx(2 * 4096**3 / (3 * 4096 * 4096 * 4))  # above the ridge of 25 FLOP/B
    assert big["roofline_fraction"] == pytest.approx(big["tflops"] * 1e12 / GIVEN["flops"])  # compute bound
    skinny = done[done["shape"] == "16x4096x4096"].iloc[0]
    bytes_ = (16 * 4096 + 4096 * 4096 + 16 * 4096) * 4
    assert skinny["intensity"] == pytest.approx(2 * 16 * 4096 * 4096 / bytes_)  # below the ridge
    bound = skinny["intensity"] * GIVEN["bandwidth"]
    assert skinny["roofline_fraction"] == pytest.approx(skinny["tflops"] * 1e12 / bound)  # bandwidth bound
    assert (done["roofline_fraction"] > 0).all()
    halved = report.trials(JOURNAL, ceilings={**GIVEN, "flops": GIVEN["flops"] / 2})
    row = halved[(halved["study"] == big["study"]) & (halved["trial"] == big["trial"])].iloc[0]
    assert row["roofline_fraction"] == pytest.approx(2 * big["roofline_fraction"])


def test_without_a_measured_ceiling_there_is_no_fraction_and_the_roofline_says_so(tmp_path, monkeypatch, bare):
    monkeypatch.chdir(tmp_path)  # no benchmarks/results/ here: no ceiling to read
    df = report.trials(JOURNAL)
    done = df[df["status"] == "complete"]
    assert (done["intensity"] > 0).all() and df["roofline_fraction"].isna().all()
    assert report.best(TUNED)["roofline_fraction"].isna().all()
    rep, out = bare
    assert "Roofline" in rep.plots  # the trials against their intensity, without a roof
    notes = [n for n in rep.notes if n.startswith("Roofline")]
    assert len(notes) == 1 and "no measured ceiling for recorded float32" in notes[0]
    assert "no measured ceiling" in (out / "report.html").read_text()


def write_ceilings(path: Path, gpu: str, flops: dict, bandwidth: float) -> Path:
    doc = {"gpu": {"key": gpu}, "date": "2026-12-01", "method": "test input", "ceilings": {"flops": flops,
           "bandwidth": bandwidth}}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(__import__("json").dumps(doc))
    return path


def test_measured_ceilings_files_apply_to_their_gpu_and_dtypes_only(tmp_path, monkeypatch):
    results = tmp_path / "benchmarks" / "results"
    file = write_ceilings(results / "ceilings.json", "nvidia-h200-sm90", {"float32": 40e12, "float16": 4e14}, 3e12)
    (results / "gemm_other.json").write_text('{"rows": []}')  # benchmark results without ceilings: passed over
    (results / "notes.json").write_text("not JSON")
    runs = tmp_path / "runs" / "gemm"
    runs.mkdir(parents=True)
    for gpu in ("nvidia-h200-sm90", "other-gpu"):
        shutil.copyfile(JOURNAL, runs / f"{gpu}.journal")
    monkeypatch.chdir(tmp_path)
    df = report.trials(tmp_path / "runs")
    done = df[df["status"] == "complete"]
    mine = done[done["gpu"] == "nvidia-h200-sm90"]
    roof = (mine["intensity"] * 3e12).clip(upper=40e12)
    assert ((mine["roofline_fraction"] - mine["tflops"] * 1e12 / roof).abs() < 1e-12).all() and len(mine)
    assert done.loc[done["gpu"] == "other-gpu", "roofline_fraction"].isna().all()  # never another GPU's ceiling
    monkeypatch.chdir(DATA)
    same = report.trials(tmp_path / "runs", ceilings=file)  # a file given explicitly, from anywhere
    assert same["roofline_fraction"].equals(df["roofline_fraction"])
    assert report.trials(JOURNAL, ceilings=results)["roofline_fraction"].isna().all()  # "recorded" is no GPU key
    rep = report.write_report(tmp_path / "runs", tmp_path / "out", ceilings=results, plots=False)  # notes: no plot
    page = (tmp_path / "out" / "report.html").read_text()
    assert f"float32 peak 40.0 TFLOP/s, bandwidth 3.0 TB/s (from {file})" in page
    assert [n for n in rep.notes if "no measured ceiling" in n] == [
        "Roofline gemm/other-gpu: no measured ceiling for other-gpu float32, so no roof and no fraction of it; pass "
        "ceilings, or put a measured ceilings file in benchmarks/results/"
    ]
    lookup = report.ceiling_lookup(file)
    assert lookup("nvidia-h200-sm90", "float16").flops == 4e14 and lookup("nvidia-h200-sm90", "bfloat16") is None


def test_given_ceilings_may_differ_per_dtype():
    lookup = report.ceiling_lookup({"flops": {"float32": 40e12, "float16": 4e14}, "bandwidth": 3e12})
    assert lookup("any-gpu", "float16").flops == 4e14 and lookup(None, "float32").attainable(1.0) == 3e12
    assert lookup("any-gpu", "tfloat32") is None
    df = report.trials(JOURNAL, ceilings={"flops": {"float16": 4e14}, "bandwidth": 3e12})
    assert df["roofline_fraction"].isna().all()  # the journal's studies are float32


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: {"flops": -1.0, "bandwidth": 1e12}, ["'flops'", "positive"]),
        (lambda d: {"flops": 1e12}, ["'bandwidth'", "bytes per second"]),
        (lambda d: d / "missing.json", ["does not exist"]),
        (lambda d: (d / "empty").mkdir() or d / "empty", ["holds no measured ceilings"]),
        (lambda d: write_ceilings(d / "c.json", "", {"float32": 1e12}, 1e12), ["c.json: gpu.key"]),
        (lambda d: write_ceilings(d / "c.json", "g", 1e12, 1e12), ["c.json: ceilings.flops"]),
        (lambda d: write_ceilings(d / "c.json", "g", {"float32": 1e12}, "fast"), ["c.json: ceilings.bandwidth"]),
    ],
)
def test_bad_ceilings_are_one_sentence(make, words, tmp_path):
    with pytest.raises(AutotuneError) as info:
        report.trials(JOURNAL, ceilings=make(tmp_path))
    assert all(w in str(info.value) for w in words) and "\n" not in str(info.value), str(info.value)


def test_work_comes_from_each_familys_own_problem():
    # conv n1c64h56w56k64r3s3u1p1: P = Q = 56; 2 N K P Q C R S FLOPs; x, w read and y written once (float32)
    conv = report.problem_work("conv2d", "n1c64h56w56k64r3s3u1p1", "float32", "NCHW")
    assert conv == (2 * 64 * 56 * 56 * 64 * 9, (64 * 56 * 56 + 64 * 64 * 9 + 64 * 56 * 56) * 4)
    assert report.problem_work("gemm", "16x32x64", "float16", "TN") == (
        2 * 16 * 32 * 64,
        (16 * 64 + 64 * 32 + 16 * 32) * 2,
    )
    for unknown in (("nosuch", "16x32x64", "float32", "NN"), ("gemm", "n1c1h1w1k1r1s1u1p0", "float32", "NN"),
                    ("gemm", "16x32x64", "float99", "NN"), (None, "my-study", None, None)):  # fmt: skip
        assert all(math.isnan(v) for v in report.problem_work(*unknown)), unknown


def test_best_so_far_is_monotone_and_ends_at_the_best(df):
    for _, g in df.groupby("study"):
        ms = g["best_ms_so_far"].dropna()
        tf = g["best_tflops_so_far"].dropna()
        assert len(ms) and (ms.diff().dropna() <= 0).all() and (tf.diff().dropna() >= 0).all()
        done = g[g["status"] == "complete"]
        assert ms.iloc[-1] == done["median_ms"].min()
        assert tf.iloc[-1] == done["tflops"].max()


def test_vendor_ratio_comes_from_the_tuned_dir_or_a_given_time(df):
    import json

    doc = json.loads((TUNED / "nvidia-h200-sm90" / "gemm.json").read_text())
    vendor = doc["entries"]["float32/NN/4096x4096x4096"]["vendor_median_ms"]
    rows = df[(df["shape"] == "4096x4096x4096") & (df["status"] == "complete")]
    assert (rows["vendor_median_ms"] == vendor).all() and (rows["vendor"] == "cuBLAS").all()
    assert ((rows["vendor_ratio"] - vendor / rows["median_ms"]).abs() < 1e-12).all()
    assert report.trials(JOURNAL)["vendor_ratio"].isna().all()
    given = report.trials(JOURNAL, vendor_ms={"16x4096x4096": 0.1})
    assert (given.loc[given["shape"] == "16x4096x4096", "vendor_median_ms"] == 0.1).all()


def test_duplicates_are_left_out(tmp_path):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = tmp_path / "with-duplicate.journal"
    shutil.copyfile(JOURNAL, path)
    storage = JournalStorage(JournalFileBackend(str(path)))
    study = optuna.load_study(study_name=STUDIES[0], storage=storage)
    again = study.trials[0]
    study.add_trial(optuna.trial.create_trial(
        params=again.params, distributions=again.distributions, value=again.value,
        user_attrs={**again.user_attrs, "duplicate_of": again.number},
    ))  # fmt: skip
    assert len(report.trials(path)) == len(report.trials(JOURNAL))


def test_a_runs_directory_reads_every_journal_and_a_url_reads_the_storage(tmp_path):
    import optuna

    runs = tmp_path / "runs"
    for spec in ("gemm", "gemm-copy"):
        (runs / spec).mkdir(parents=True)
        shutil.copyfile(JOURNAL, runs / spec / "nvidia-h200-sm90.journal")
    both = report.trials(runs, tuned_dir=TUNED)
    n = len(report.trials(JOURNAL))
    assert len(both) == 2 * n
    assert set(both["run"]) == {"gemm/nvidia-h200-sm90", "gemm-copy/nvidia-h200-sm90"}
    assert set(both["gpu"]) == {"nvidia-h200-sm90"}
    assert both["vendor_ratio"].notna().any()
    for run, g in both.groupby("run"):  # best so far restarts with every journal
        assert g["best_ms_so_far"].dropna().is_monotonic_decreasing, run

    # The first 5 trials of each study copied into SQLite (copy_study writes trial by trial, seconds for all 207):
    # the same rows as the journal they came from, but for where they were read.
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    short = record(tmp_path / "first-5.journal", first=5)
    source = JournalStorage(JournalFileBackend(str(short)))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for name in STUDIES:
        optuna.copy_study(from_study_name=name, from_storage=source, to_storage=url)
    from_url, journal = report.trials(url), report.trials(short)
    assert len(from_url) == len(journal) == 10 and set(from_url["run"]) == {url}
    same = [c for c in journal.columns if c not in ("run", "gpu", "source")]
    assert from_url[same].equals(journal[same]), "the storage reads back other trials than the journal's"


@pytest.mark.parametrize(
    "source, words",
    [
        ("no/such/journal", ["does not exist"]),
        (str(DATA / "tuned" / "nvidia-h200-sm90" / "gemm.json"), ["line 1: it is not JSON", "Optuna study journal"]),
        (str(DATA / "tuned"), ["no study journals"]),
        ("sqlite:///no/such.db", ["no such SQLite file"]),
    ],
)
def test_unreadable_sources_are_one_sentence(source, words):
    with pytest.raises(AutotuneError) as info:
        report.trials(source)
    assert all(w in str(info.value) for w in words) and "\n" not in str(info.value)


# --- best() and compare() ---------------------------------------------------------------------------------


def test_best_lists_every_stored_entry_with_its_provenance():
    import json

    doc = json.loads((TUNED / "nvidia-h200-sm90" / "gemm.json").read_text())
    b = report.best(TUNED)
    assert len(b) == len(doc["entries"])
    assert set(b["dtype"] + "/" + b["layout"] + "/" + b["shape"]) == set(doc["entries"])
    assert set(b["gpu"]) == {"nvidia-h200-sm90"} and set(b["kernel"]) == {"gemm"}
    row = b[b["shape"] == "4096x4096x4096"].iloc[0]
    entry = doc["entries"]["float32/NN/4096x4096x4096"]
    for column in ("kernel_name", "median_ms", "tflops", "vendor_ratio", "template_hash", "source_hash", "date",
                   "trials", "study", "spec"):  # fmt: skip
        assert row[column] == entry[column], column
    assert row["cuda_driver"] == entry["versions"]["cuda_driver"] and row["verified"]
    assert (row["flops"], row["bytes"]) == (2 * 4096**3, 3 * 4096 * 4096 * 4)
    given = report.best(TUNED, ceilings=GIVEN).set_index("shape")
    assert given.loc["4096x4096x4096", "roofline_fraction"] == pytest.approx(entry["tflops"] * 1e12 / GIVEN["flops"])
    one_gpu = report.best(TUNED / "nvidia-h200-sm90")
    one_file = report.best(TUNED / "nvidia-h200-sm90" / "gemm.json")
    assert one_gpu.equals(b) and one_file.equals(b)


def test_compare_of_identical_inputs_is_one_everywhere():
    same_run = report.compare(JOURNAL, JOURNAL)
    assert sorted(same_run["shape"]) == ["16x4096x4096", "4096x4096x4096"]
    same_gpu = report.compare(TUNED, TUNED / "nvidia-h200-sm90" / "gemm.json")
    assert len(same_gpu) == len(report.best(TUNED))
    for cmp in (same_run, same_gpu):
        assert (cmp["ms_ratio"] == 1.0).all() and (cmp["tflops_ratio"] == 1.0).all()
        assert (cmp["kernel_name_a"] == cmp["kernel_name_b"]).all()


def test_compare_with_a_shorter_run_of_the_same_trials(tmp_path):
    shorter = record(tmp_path / "first-30.journal", first=30)
    cmp = report.compare(JOURNAL, shorter).set_index("shape")
    full = report.best_per_shape(report.trials(JOURNAL)).set_index("shape")
    part = report.best_per_shape(report.trials(shorter)).set_index("shape")
    for shape in full.index:
        assert cmp.loc[shape, "ms_ratio"] == pytest.approx(part.loc[shape, "median_ms"] / full.loc[shape, "median_ms"])
        assert cmp.loc[shape, "ms_ratio"] >= 1.0 and cmp.loc[shape, "tflops_ratio"] <= 1.0  # a subset is not faster


def test_compare_of_a_run_with_tuned_results_matches_shapes():
    cmp = report.compare(JOURNAL, TUNED).set_index("shape")
    assert len(cmp) == len(report.best(TUNED))  # shapes only one side has get empty cells
    assert cmp["ms_ratio"].notna().sum() == 2
    assert cmp.loc["4096x4096x4096", "ms_ratio"] == pytest.approx(3.024464 / 3.027008, rel=1e-5)


# --- the report ---------------------------------------------------------------------------------------------


def test_report_writes_csv_markdown_and_one_self_contained_page(made):
    rep, out = made
    assert sorted(p.name for p in out.iterdir()) == ["best.csv", "report.html", "report.md", "trials.csv", "tuned.csv"]
    import pandas as pd

    assert len(pd.read_csv(out / "trials.csv")) == len(rep.trials) == 207
    best = pd.read_csv(out / "best.csv")
    assert list(best["shape"]) == ["4096x4096x4096", "16x4096x4096"] and (best["complete"] > 0).all()
    md = (out / "report.md").read_text()
    assert "## Best per shape" in md and "| shape |" in md and "4096x4096x4096" in md
    page = (out / "report.html").read_text()
    assert "<script" not in page and "<link" not in page and "href=" not in page and "url(" not in page
    sources = re.findall(r'src="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    pngs = embedded_pngs(page)
    assert len(pngs) == len(rep.plots) == PLOTS_WITH_TUNED
    for png in pngs:
        width, height, _ = png_image(png)
        assert width > 300 and height > 100
    titles = ("Best so far", "Parameter importance", "Roofline", "Speedup vs the vendor", "Parameters vs TFLOP/s")
    for title in titles:
        assert any(p.startswith(title) for p in rep.plots), title


def test_report_without_a_tuned_dir_says_why_the_speedup_plot_is_missing(bare):
    rep, out = bare
    assert not any(p.startswith("Speedup vs the vendor") for p in rep.plots) and not (out / "tuned.csv").exists()
    assert len(rep.plots) == PLOTS_WITH_TUNED - 2  # no speedup, and no importance (next test)
    assert any("--tuned-dir" in n for n in rep.notes)
    assert "--tuned-dir" in (out / "report.html").read_text()


def test_importance_is_skipped_with_a_note_when_a_study_has_too_few_complete_trials(bare):
    rep, out = bare
    assert not any(p.startswith("Parameter importance") for p in rep.plots)
    assert sum("parameter importance for" in n for n in rep.notes) == 2
    page = (out / "report.html").read_text()
    assert "importance needs 5" in page and len(embedded_pngs(page)) == len(rep.plots)


def test_missing_matplotlib_is_one_sentence_naming_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(AutotuneError, match=re.escape("pip install 'autotune[report]'")):
        report.require_matplotlib()
    assert main(["report", str(JOURNAL), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("autotune: error:") and "autotune[report]" in err[0]


def test_without_plots_the_report_needs_no_matplotlib_and_keeps_its_tables_and_notes(monkeypatch, tmp_path, capsys,
                                                                                     made):  # fmt: skip
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    rep = report.write_report(JOURNAL, tmp_path / "out", tuned_dir=TUNED, plots=False)
    full, folder = made
    assert rep.plots == [] and "Plots: not drawn (plots=False, autotune report --no-plots)" in rep.notes
    assert rep.best.equals(full.best) and [p.name for p in rep.files] == [p.name for p in full.files]
    page = (tmp_path / "out" / "report.html").read_text()
    assert embedded_pngs(page) == [] and len(embedded_pngs((folder / "report.html").read_text())) == len(full.plots)
    assert (tmp_path / "out" / "trials.csv").read_text() == (folder / "trials.csv").read_text()
    assert main(["report", str(JOURNAL), "--no-plots", "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert "Best per shape" in out and "(no plots: --no-plots)" in out


# --- the command line ----------------------------------------------------------------------------------------


def test_cli_report_prints_the_tables_and_writes_the_files(cli_made):
    code, out, _, folder = cli_made
    assert code == 0
    assert "Best per shape" in out and "Trial outcomes per shape" in out and "x vendor" in out
    assert "gemm_simt_bm128_bn256_bk16_wm64_wn64_wniter4_tm8_tn4_vec4_pad4_dbuf1" in out
    assert {p.name for p in folder.iterdir()} >= {"trials.csv", "best.csv", "report.md", "report.html"}


def test_cli_compare_prints_ratios_and_writes_csv_and_markdown(tmp_path, capsys):
    assert main(["compare", str(JOURNAL), str(JOURNAL), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "B/A time" in out and "1.000" in out
    assert (tmp_path / "compare.csv").exists() and "| shape |" in (tmp_path / "compare.md").read_text()
    assert main(["compare", str(TUNED), str(TUNED / "nvidia-h200-sm90"), "--out", str(tmp_path)]) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "no/such/runs"],
        ["report", str(JOURNAL), "--tuned-dir", "no/such/tuned"],
        ["report", str(TUNED / "nvidia-h200-sm90" / "gemm.json")],
        ["compare", str(JOURNAL), "no/such/journal"],
        ["compare", "no/such/tuned.json", str(TUNED)],
    ],
)
def test_cli_missing_inputs_are_one_error_line(argv, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error:") and "Traceback" not in err
    assert not any(tmp_path.iterdir())


# --- in a browser ----------------------------------------------------------------------------------------------


def screenshot(page: Path, png: Path, width: int, height: int) -> None:
    """Headless Chromium's screenshot of ``page``; the whole process group is killed if it hangs."""
    with tempfile.TemporaryDirectory() as profile:
        argv = [
            "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={width},{height}", page.as_uri(),
        ]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail("chromium did not finish the screenshot in 120 s")
    assert png.exists(), log.decode(errors="replace")[-2000:]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="the chromium binary is not installed")
def test_the_page_renders_in_a_headless_browser(made, tmp_path):
    rep, out = made
    shot = tmp_path / "report.png"
    screenshot(out / "report.html", shot, 1400, 3000)
    width, height, raw = png_image(shot.read_bytes())
    assert (width, height) == (1400, 3000)
    try:
        from PIL import Image
    except ImportError:  # no Pillow: the decompressed rows must at least not be one repeated value
        assert len(set(raw)) > 64
    else:
        with Image.open(shot) as im:
            rgb = im.convert("RGB")
            colors = rgb.getcolors(maxcolors=1 << 24)
            white = sum(n for n, c in colors if c == (255, 255, 255))
        assert len(colors) > 500  # plots, text and tables, not a blank or single-colour page
        assert white < 0.97 * width * height
    for png in embedded_pngs((out / "report.html").read_text()):
        png_image(png)


REAL_REPORT = DATA / "real_report.html"


@pytest.mark.skipif(shutil.which("chromium") is None, reason="the chromium binary is not installed")
def test_the_committed_report_of_the_real_h200_run_renders(tmp_path):
    # tests/data/real_report.html was made by `autotune report` from the journal of a real H200 run.
    html = REAL_REPORT.read_text()
    images = list(embedded_pngs(html))
    assert len(images) >= 8 and 'src="http' not in html and "<script" not in html
    for png in images:
        png_image(png)
    shot = tmp_path / "real.png"
    screenshot(REAL_REPORT, shot, 1400, 2600)
    width, height, raw = png_image(shot.read_bytes())
    assert (width, height) == (1400, 2600) and len(set(raw)) > 64


def test_compare_two_configurations_of_a_run():
    df = report.trials(DATA / "recorded.journal")
    done = df[df["status"] == "complete"].sort_values("median_ms")
    fast, slow = done["kernel_name"].iloc[0], done["kernel_name"].iloc[-1]
    source = str(DATA / "recorded.journal")
    cmp = report.compare(f"{source}@{fast}", f"{source}@{slow}")
    both = cmp.dropna(subset=["median_ms_a", "median_ms_b"])
    assert len(both) >= 1
    for _, row in both.iterrows():
        a = done[(done["kernel_name"] == fast) & (done["shape"] == row["shape"])]["median_ms"].min()
        b = done[(done["kernel_name"] == slow) & (done["shape"] == row["shape"])]["median_ms"].min()
        assert row["ms_ratio"] == pytest.approx(b / a) and row["ms_ratio"] > 1
    with pytest.raises(AutotuneError, match="no complete trial of gemm_nothing"):
        report.compare(f"{source}@gemm_nothing", source)


def test_cli_compare_is_narrow_and_says_what_it_leaves_out(tmp_path, capsys):
    """A run of 2 shapes against tuned results of 6: the 4 one-sided shapes are one line, not 4 half-empty rows."""
    assert main(["compare", str(JOURNAL), str(TUNED), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    paths = ("A: ", "B: ", "wrote ")  # lines that hold the (absolute) paths given
    assert max(len(line) for line in out.splitlines() if not line.startswith(paths)) <= 100
    table = [ln for ln in out.splitlines() if ln.strip().startswith("gemm ")]
    assert sorted(ln.split()[3] for ln in table) == ["16x4096x4096", "4096x4096x4096"]
    omitted = [ln for ln in out.splitlines() if ln.startswith("omitted:")]
    assert len(omitted) == 1 and "4 shapes only in B" in omitted[0] and "--all" in omitted[0]
    assert "(nvidia-h200-sm90)" in out and "A kernel" not in out
    assert len(pd.read_csv(tmp_path / "compare.csv")) == 6, "compare.csv lost the one-sided rows"
    assert main(["compare", str(JOURNAL), str(TUNED), "--out", str(tmp_path), "--all"]) == 0
    out = capsys.readouterr().out
    assert "omitted" not in out and len([ln for ln in out.splitlines() if ln.strip().startswith("gemm ")]) == 6


def test_compare_lists_differing_winners_below_the_table():
    df = report.compare(JOURNAL, JOURNAL)
    df.loc[df.index[0], "kernel_name_b"] = "gemm_simt_other"
    shown, notes = report.compare_view(df)
    assert list(shown["winner"]) == ["differs", "same"]
    assert notes[0] == "winners that differ:" and "B gemm_simt_other" in notes[1]
    assert report.compare_view(df, list_winners=False)[1] == []


def test_a_url_with_a_user_is_not_a_configuration_reference():
    assert report.config_ref("postgresql://tuner@db/autotune") is None
    assert report.config_ref("runs/gemm@gemm_simt_bm128") == ("runs/gemm", "gemm_simt_bm128")
