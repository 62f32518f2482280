"""records: the entry key and TunedEntry: round trips, and one sentence naming the field for each bad value."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from autotune.core.records import EntryKey, RecordError, TunedEntry

FULL = {
    "template": "mma",
    "params": {"BM": 128, "SWIZZLE": True, "FRAG": "m16n16k16", "RATIO": 0.5},
    "kernel_name": "gemm_mma_x",
    "template_hash": "554d7a9e9e28e023",
    "source_hash": "82726a3a5bea5ec1",
    "verified": True,
    "error": 0.001,
    "tolerance": 0.015,
    "median_ms": 0.4,
    "min_ms": 0.39,
    "max_ms": 0.42,
    "iqr_ms": 0.005,
    "repeats": 200,
    "tflops": 340.2,
    "gbps": 249.2,
    "registers": 255,
    "extra_bytes": 0,
    "energy_j": None,
    "gflops_per_j": None,
    "energy_method": None,
    "objective": ["time"],
    "vendor": "cuBLAS (torch)",
    "vendor_median_ms": 0.88,
    "vendor_ratio": 2.2,
    "versions": {"cuda_driver": "13.0", "nvrtc": "13.0"},
    "date": "2026-11-29T16:42:58+00:00",
    "trials": 150,
    "spec": "configs/gemm_bf16.yaml",
    "study": "gemm.auto.bfloat16.4095x4097x4093.d3273114.6e7e82",
    "pareto": [{"params": {"BM": 64}, "kernel_name": "k", "median_ms": 0.5, "energy_j": 0.01, "verified": True}],
}


def test_a_full_entry_round_trips_in_its_written_order():
    e = TunedEntry.from_json(FULL)
    assert json.dumps(e.to_json()) == json.dumps(FULL)
    assert TunedEntry.from_json(e.to_json()) == e


def test_a_minimal_entry_gets_null_provenance_and_the_time_objective():
    out = TunedEntry.from_json({"template": "simt", "params": {}, "verified": True, "median_ms": 1}).to_json()
    assert out["objective"] == ["time"] and out["source_hash"] is None and "pareto" not in out
    assert set(out) == set(FULL) - {"pareto"}


def test_unknown_fields_are_kept_and_written_back():
    e = TunedEntry.from_json({**FULL, "future_field": {"x": [1]}})
    assert e.extra == {"future_field": {"x": [1]}} and e.to_json()["future_field"] == {"x": [1]}


def test_a_record_cannot_be_changed():
    e = TunedEntry.from_json(FULL)
    with pytest.raises(AttributeError):
        e.median_ms = 0.1  # type: ignore[misc]
    with pytest.raises(TypeError):
        e.params["BM"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("template", None, "template must be a non-empty string"),
        ("template", "", "template must be a non-empty string"),
        ("params", "garbage", "params must be an object"),
        ("params", [1, 2], "params must be an object"),
        ("params", {"BM": None}, "params.BM must be a number"),
        ("params", {"BM": {"x": 1}}, "params.BM must be a number"),
        ("params", {"B M": 1}, "params has a parameter name 'B M' that is not an identifier"),
        ("median_ms", "fast", "median_ms must be a positive number"),
        ("median_ms", 0, "median_ms must be a positive number"),
        ("median_ms", True, "median_ms must be a positive number"),
        ("median_ms", float("nan"), "median_ms must be a positive number"),
        ("verified", False, "verified must be true"),
        ("verified", "yes", "verified must be true"),
        ("error", "small", "error must be a finite number >= 0 or null"),
        ("vendor_ratio", -2.0, "vendor_ratio must be a finite number >= 0 or null"),
        ("repeats", 2.5, "repeats must be an integer"),
        ("repeats", -1, "repeats must be an integer"),
        ("source_hash", 12, "source_hash must be a string or null"),
        ("objective", "time", "objective must be a non-empty list"),
        ("versions", {"nvrtc": 13}, "versions.nvrtc must be a version string"),
        ("pareto", {"a": 1}, "pareto must be a list"),
        ("pareto", [{"params": {}, "kernel_name": "k", "median_ms": 1.0}], "pareto[0].verified must be true"),
        ("pareto", [{"params": {}, "kernel_name": "k", "median_ms": "x", "verified": True}], "pareto[0].median_ms"),
    ],
)
def test_a_bad_field_is_one_sentence_naming_it(field, value, message):
    with pytest.raises(RecordError, match="^" + re.escape(message)) as info:
        TunedEntry.from_json({**FULL, field: value})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("field", ["template", "params", "median_ms", "verified"])
def test_a_required_field_that_is_missing_is_named(field):
    with pytest.raises(RecordError, match=field):
        TunedEntry.from_json({k: v for k, v in FULL.items() if k != field})


@pytest.mark.parametrize("doc", ["a string", 3, None, ["template"]])
def test_an_entry_that_is_not_an_object_is_refused(doc):
    with pytest.raises(RecordError, match="the entry must be an object"):
        TunedEntry.from_json(doc)


def test_a_long_bad_value_is_cut_in_the_message():
    with pytest.raises(RecordError) as info:
        TunedEntry.from_json({**FULL, "template": 7, "kernel_name": "x" * 100_000})
    assert len(str(info.value)) < 200
    with pytest.raises(RecordError) as info:
        TunedEntry.from_json({**FULL, "kernel_name": ["x" * 100_000]})
    assert len(str(info.value)) < 200


def _random_entry(rng: random.Random) -> dict:
    """A random valid entry: required fields, then a random subset of the optional ones with random values."""
    values = [rng.randint(0, 512), rng.random(), True, "m16n8k8"]
    e = {
        "template": rng.choice(["simt", "mma", "winograd"]),
        "params": {f"P{i}": rng.choice(values) for i in range(rng.randint(0, 6))},
        "verified": True,
        "median_ms": rng.uniform(1e-4, 1e3),
    }
    for name in rng.sample(sorted(set(FULL) - set(e)), rng.randint(0, len(FULL) - 4)):
        nullable = name not in ("objective", "versions", "pareto")
        e[name] = None if nullable and rng.random() < 0.3 else FULL[name]
    return e


def test_random_valid_entries_round_trip():
    rng = random.Random(24)
    for _ in range(300):
        doc = _random_entry(rng)
        e = TunedEntry.from_json(doc)
        out = e.to_json()
        assert {k: out[k] for k in doc} == doc and TunedEntry.from_json(out) == e


def test_random_corruptions_name_the_corrupted_field():
    rng = random.Random(23)
    garbage = [{"x": [1]}, [None], -5, float("inf")]
    for _ in range(300):
        doc = _random_entry(rng)
        name = rng.choice(sorted(doc))
        bad = rng.choice(garbage)
        with pytest.raises(RecordError) as info:
            TunedEntry.from_json({**doc, name: bad})
        assert str(info.value).startswith(name), (name, bad, str(info.value))


@pytest.mark.parametrize("text", ["float32/NN/64x64x64", "float16/NHWC/n1c64h56w56k64r3s3u1p1"])
def test_keys_are_built_and_parsed_in_one_place(text):
    key = EntryKey.parse(text)
    assert str(key) == text and EntryKey(key.dtype, key.layout, key.label) == key


@pytest.mark.parametrize("text", ["float32/NN", "axbxc", "a/b/c/d", "float32//64x64x64", " float32/NN/1x1x1", 7, None])
def test_a_malformed_key_is_one_sentence(text):
    with pytest.raises(RecordError, match="is not dtype/layout/shape"):
        EntryKey.parse(text)


def test_every_committed_entry_validates():
    files = sorted((Path(__file__).resolve().parents[2] / "tuned").glob("*/*.json"))
    checked = 0
    for f in files:
        for key, raw in json.loads(f.read_text())["entries"].items():
            EntryKey.parse(key)
            assert TunedEntry.from_json(raw).to_json() == raw, (f, key)
            checked += 1
    assert checked >= 20
