"""T4 records: Kernel Tuner cache import, T4 round trips, export of a study. No GPU."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from autotune.build.compile_pool import CompilePool
from autotune.cli import main
from autotune.core.errors import AutotuneError
from autotune.measure.evaluate import Settings
from autotune.tune.search import open_storage, study_name, tune_shape
from autotune.tune.spec import load_spec
from autotune.tune.t4 import Validity, from_kt_cache, load_record, study_record, subset, to_kt_cache, to_t4, write_t4
from tests.fakes import NAIVE_SPEC, FakeEvaluator, fake_compile, fake_time

KT_DIR = next(
    (d / "data" / "kernel_tuner" for d in (Path(__file__).resolve().parents[i] / "shared" for i in (2, 3, 4))
     if (d / "data" / "kernel_tuner").is_dir()),
    None,
)  # fmt: skip
RECORD = Path(__file__).parents[1] / "data" / "records" / "convolution_A100.subset400.json.gz"


def kt_cache() -> dict:
    """A small Kernel Tuner cache: two parameters, one of each failure kind, one configuration absent."""

    def entry(x: int, y: int, time: float | str) -> dict:
        e = {"x": x, "y": y, "time": time, "compile_time": 100.0 + x, "verification_time": 1.0,
             "benchmark_time": 20.0, "framework_time": 2.0, "timestamp": "2024-01-01 00:00:00"}  # fmt: skip
        if not isinstance(time, str):
            e["times"] = [time * 0.99, time, time * 1.01]
            e["GFLOP/s"] = 1.0 / time
        return e

    entries = [entry(1, 1, 3.0), entry(1, 2, 2.0), entry(2, 1, "CompilationFailedConfig"),
               entry(2, 2, "RuntimeFailedConfig"), entry(4, 1, "InvalidConfig"), entry(4, 2, 1.5)]  # fmt: skip
    return {
        "device_name": "Fake GPU", "kernel_name": "k", "problem_size": [64, 64], "tune_params_keys": ["x", "y"],
        "tune_params": {"x": [1, 2, 4], "y": [1, 2, 3]}, "objective": "time",
        "cache": {f"{e['x']},{e['y']}": e for e in entries},
    }  # fmt: skip


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_kernel_tuner_cache_keeps_failed_and_invalid_configurations(tmp_path, suffix):
    path = tmp_path / f"cache{suffix}"
    text = json.dumps(kt_cache())
    if suffix.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    r = load_record(path)
    assert [p.name for p in r.params] == ["x", "y"] and r.params[1].values == (1, 2, 3)
    validity = {e.config.key: e.validity for e in r.entries}
    assert validity == {
        "x=1,y=1": Validity.CORRECT, "x=1,y=2": Validity.CORRECT, "x=2,y=1": Validity.COMPILE,
        "x=2,y=2": Validity.RUNTIME, "x=4,y=1": Validity.CONSTRAINTS, "x=4,y=2": Validity.CORRECT,
    }  # fmt: skip
    assert "x=1,y=3" not in r.by_key  # absent: infeasible
    assert r.optimum_ms == 1.5
    assert not any(e.ok for e in r.entries if e.validity is not Validity.CORRECT)
    assert r.by_key["x=1,y=2"].runtimes_ms == (2.0 * 0.99, 2.0, 2.0 * 1.01)
    assert r.by_key["x=2,y=1"].compile_ms == 102.0 and r.provenance["device_name"] == "Fake GPU"


@pytest.mark.skipif(KT_DIR is None, reason="the shared Kernel Tuner records are not beside this checkout")
def test_the_shared_kernel_tuner_records_import_with_every_failure():
    for path in sorted(KT_DIR.glob("*.json.gz")):
        raw = json.loads(gzip.open(path, "rt").read())
        r = load_record(path)
        assert len(r.entries) == len(raw["cache"])
        failed = sum(isinstance(e["time"], str) for e in raw["cache"].values())
        assert sum(not e.ok for e in r.entries) == failed
        best = min(e["time"] for e in raw["cache"].values() if not isinstance(e["time"], str))
        assert r.optimum_ms == best


@pytest.mark.parametrize("name", ["rec.json", "rec.json.gz"])
def test_t4_round_trip_keeps_every_field(tmp_path, name):
    r = from_kt_cache(kt_cache(), "cache")
    again = load_record(write_t4(r, tmp_path / name))
    assert again.params == r.params and again.entries == r.entries and again.name == r.name
    doc = json.loads(gzip.open(tmp_path / name, "rt").read() if name.endswith(".gz") else (tmp_path / name).read_text())
    first = doc["results"][0]
    assert doc["schema_version"] == "1.0.0"
    assert {"timestamp", "configuration", "times", "invalidity", "correctness", "measurements", "objectives"} <= set(
        first
    )
    assert {"compilation", "benchmark", "framework", "validation", "runtimes"} <= set(first["times"])


def test_a_t4_file_without_our_metadata_takes_its_space_from_the_configurations(tmp_path):
    doc = json.loads(json.dumps(to_t4(from_kt_cache(kt_cache(), "c"))))
    del doc["metadata"]
    (tmp_path / "kt.json").write_text(json.dumps(doc))
    r = load_record(tmp_path / "kt.json")
    assert r.params[0].values == (1, 2, 4) and r.params[1].values == (1, 2)  # y=3 was never measured
    assert r.optimum_ms == 1.5


def test_the_committed_record_is_a_subset_that_keeps_the_optimum_and_failures():
    r = load_record(RECORD)
    assert len(r.entries) == 400
    assert any(e.validity is Validity.RUNTIME for e in r.entries)
    assert r.provenance["subset_of"] == "convolution_A100"
    small = subset(r, 50, seed=3)
    assert len(small.entries) == 50 and small.optimum_ms == r.optimum_ms
    assert all(e.config[p.name] in p.values for e in small.entries for p in small.params)


def test_export_of_a_brute_force_study_holds_every_feasible_configuration(tmp_path):
    spec_path = tmp_path / "naive.yaml"
    spec_path.write_text(NAIVE_SPEC.replace("sampler: tpe", "sampler: brute"))
    spec = load_spec(spec_path)
    journal = str(tmp_path / "s.journal")
    fail = "BX=16,BY=4"
    evaluator = FakeEvaluator(fail_keys=frozenset({fail}))
    tune_shape(
        spec, spec.problems[0], Settings(arch="sm_90", tolerance=1e-5), open_storage(journal), trials=1000,
        minutes=None, evaluator=evaluator, compiler=CompilePool("sm_90", 1, fake_compile), prefetch=2, abort_ratio=None,
    )  # fmt: skip
    name = study_name(spec, spec.problems[0])
    r = study_record(open_storage(journal), name)
    feasible = {c.key for c in spec.space.enumerate()}
    assert {e.config.key for e in r.entries} == feasible and len(r.entries) == len(feasible)
    assert not r.by_key[fail].correct and r.by_key[fail].status == "verify-failed"
    assert r.optimum_ms == min(fake_time(c.as_dict()) for c in spec.space.enumerate() if c.key != fail)
    assert r.provenance["study"] == name and "template_hash" in r.provenance and "gpu" in r.provenance
    assert {p.name for p in r.params} == {"BX", "BY"}
    out = tmp_path / "rec.json.gz"
    assert main(["export-t4", journal, "--out", str(out)]) == 0
    again = load_record(out)
    assert again.entries == load_record(write_t4(r, tmp_path / "direct.json")).entries


def test_bad_records_and_sources_are_one_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AutotuneError, match="not a readable JSON record"):
        load_record(bad)
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    with pytest.raises(AutotuneError, match="neither a T4 results file"):
        load_record(other)
    broken = tmp_path / "broken.json"
    broken.write_text('{"results": [{"configuration": {"x": 1}}]}')
    with pytest.raises(AutotuneError, match="malformed record entry"):
        load_record(broken)
    with pytest.raises(AutotuneError, match="not found"):
        load_record(tmp_path / "missing.json.gz")
    assert main(["export-t4", str(tmp_path / "none.journal"), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "no such journal file" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_record_converts_back_to_a_kernel_tuner_cache():
    """What Kernel Tuner's simulation mode replays (benchmarks/replay_vs_kernel_tuner.py): failures keep their kind."""
    raw = kt_cache()
    back = to_kt_cache(from_kt_cache(raw, "c"))
    assert back["tune_params_keys"] == raw["tune_params_keys"] and back["tune_params"] == raw["tune_params"]
    assert set(back["cache"]) == set(raw["cache"])
    for key, e in raw["cache"].items():
        assert back["cache"][key]["time"] == e["time"]
        assert back["cache"][key]["compile_time"] == e["compile_time"]
