"""tuned/ files: merge rules, atomic writes, corrupt files."""

from __future__ import annotations

import json
import logging
import multiprocessing
import threading
from pathlib import Path

import pytest

from autotune.core.errors import StoreError
from autotune.core.records import SCHEMA
from autotune.results.store import entry_key, load, merge, migrate, read, tuned_file

HEADER = {"kernel": "gemm", "gpu": {"name": "NVIDIA H200", "arch": "sm_90", "key": "nvidia-h200-sm90"}}


def entry(ms: float, **extra) -> dict:
    return {"template": "simt", "verified": True, "median_ms": ms, "params": {"BM": 128}, **extra}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tuned_file(tmp_path / "tuned", "nvidia-h200-sm90", "gemm")


def test_first_entry_is_written_with_header(path):
    out = merge(path, HEADER, entry_key("float32", "NN", "64x64x64"), entry(1.0))
    assert out.stored and out.why == "new entry"
    doc = json.loads(path.read_text())
    assert doc["gpu"]["key"] == "nvidia-h200-sm90"
    assert doc["entries"]["float32/NN/64x64x64"]["median_ms"] == 1.0


def test_only_a_faster_entry_replaces_the_stored_one(path):
    key = entry_key("float32", "NN", "64x64x64")
    merge(path, HEADER, key, entry(1.0, tag="first"))
    slower = merge(path, HEADER, key, entry(1.5, tag="slower"))
    assert not slower.stored and "kept" in slower.why
    assert read(path)["entries"][key]["tag"] == "first"
    faster = merge(path, HEADER, key, entry(0.5, tag="faster"))
    assert faster.stored
    assert read(path)["entries"][key]["tag"] == "faster"


def test_times_taken_side_by_side_decide_over_the_stored_time(path):
    """``rival`` (new ms, stored ms) timed in one process outweighs a stored time measured in another run: a stored
    kernel whose time came from a cooler card is replaced when it runs slower beside the new one, and kept when it
    runs faster, whatever the two entries' own times say."""
    key = entry_key("float32", "NN", "64x64x64")
    merge(path, HEADER, key, entry(0.5, tag="stored on a cool card"))
    out = merge(path, HEADER, key, entry(1.0, tag="new"), rival=(1.0, 1.2))
    assert out.stored and out.why == "faster than the stored kernel timed beside it (1 ms against 1.2)"
    assert read(path)["entries"][key]["tag"] == "new" and read(path)["entries"][key]["median_ms"] == 1.0
    kept = merge(path, HEADER, key, entry(0.2, tag="newer"), rival=(1.1, 1.0))
    assert not kept.stored and kept.why == "kept the stored kernel: timed beside the new one, 1 ms against 1.1"
    assert read(path)["entries"][key]["tag"] == "new"
    failed = merge(path, HEADER, key, entry(3.0, tag="the stored one failed beside it"), rival=(3.0, float("inf")))
    assert failed.stored and read(path)["entries"][key]["tag"] == "the stored one failed beside it"


def test_force_replaces_a_faster_entry(path):
    key = entry_key("float32", "NN", "64x64x64")
    merge(path, HEADER, key, entry(1.0))
    assert merge(path, HEADER, key, entry(2.0, tag="forced"), force=True).stored
    assert read(path)["entries"][key]["tag"] == "forced"


def test_other_entries_survive_a_merge(path):
    merge(path, HEADER, "float32/NN/1x1x1", entry(1.0))
    merge(path, HEADER, "float32/NN/2x2x2", entry(1.0))
    assert set(read(path)["entries"]) == {"float32/NN/1x1x1", "float32/NN/2x2x2"}


def test_unverified_results_are_refused(path):
    with pytest.raises(ValueError, match="verified"):
        merge(path, HEADER, "float32/NN/1x1x1", {"median_ms": 0.1})
    assert not path.exists()


def test_writes_leave_no_temporary_files(path):
    for ms in (3.0, 2.0, 1.0):
        merge(path, HEADER, "float32/NN/1x1x1", entry(ms))
    assert sorted(p.name for p in path.parent.iterdir()) == [".gemm.json.lock", "gemm.json"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "no 'entries'"),
        ('{"schema": 2, "entries": []}', "no 'entries'"),
        ('{"schema": 99, "entries": {}}', "schema 99, written by a newer autotune"),
        ('{"schema": "2", "entries": {}}', "schema '2'"),
        ('{"schema": 0, "entries": {}}', "schema '0'"),
        ('{"schema": 2, "entries": {}, "gpu": "h200"}', "'gpu' must be an object"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_corrupt_files_are_reported_and_left_untouched(path, content, message):
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(StoreError, match=message) as info:
        merge(path, HEADER, "float32/NN/1x1x1", entry(1.0))
    assert str(path) in str(info.value)
    assert path.read_text() == content


def test_missing_file_reads_as_empty(path):
    assert read(path)["entries"] == {}


def test_an_entry_of_another_template_version_is_replaced_even_if_faster(path):
    key = entry_key("float32", "NN", "64x64x64")
    merge(path, HEADER, key, entry(0.5, template_hash="old"))
    out = merge(path, HEADER, key, entry(1.0, template_hash="new"))
    assert out.stored and "another version" in out.why
    assert read(path)["entries"][key]["template_hash"] == "new"


def test_written_files_are_readable_by_others(path):
    merge(path, HEADER, "float32/NN/1x1x1", entry(1.0))
    assert path.stat().st_mode & 0o044 == 0o044


def test_a_faster_entry_of_another_template_is_kept(path):
    """'auto' runs store whichever template won: a slower winner of another template is no newer version
    of the stored one's template and must not replace it."""
    key = entry_key("float16", "NN", "16x4096x4096")
    installed = {"wmma": "w1", "skinny": "s1"}.get
    merge(path, HEADER, key, entry(0.02, template="wmma", template_hash="w1"))
    out = merge(path, HEADER, key, entry(0.03, template="skinny", template_hash="s1"), installed=installed)
    assert not out.stored and "kept" in out.why
    assert read(path)["entries"][key]["template"] == "wmma"
    # without the installed hashes, only the same template with another hash counts as another version
    assert not merge(path, HEADER, key, entry(0.03, template="skinny", template_hash="s1")).stored


def test_an_entry_whose_template_changed_since_is_replaced_by_any_template(path):
    key = entry_key("float16", "NN", "16x4096x4096")
    merge(path, HEADER, key, entry(0.02, template="wmma", template_hash="w0"))
    installed = {"wmma": "w1", "skinny": "s1"}.get
    out = merge(path, HEADER, key, entry(0.03, template="skinny", template_hash="s1"), installed=installed)
    assert out.stored and "another version" in out.why


def test_an_entry_whose_source_the_edited_template_still_renders_is_compared_by_time(path):
    """A template edit that leaves a stored entry's rendered source alone (e.g. a variant for other problems)
    does not make it outdated: a slower result must not replace it."""
    key = entry_key("float16", "NN", "16x4096x4096")
    merge(path, HEADER, key, entry(0.02, template="wmma", template_hash="w0", source_hash="same"))
    installed = {"wmma": "w1"}.get
    out = merge(path, HEADER, key, entry(0.03, template="wmma", template_hash="w1"), installed=installed,
                unchanged=lambda old: old["source_hash"] == "same")  # fmt: skip
    assert not out.stored and "kept" in out.why
    out = merge(path, HEADER, key, entry(0.03, template="wmma", template_hash="w1"), installed=installed,
                unchanged=lambda old: False)  # fmt: skip
    assert out.stored and "another version" in out.why


def test_a_binary_file_is_one_sentence(path):
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(StoreError, match="not a text file") as info:
        read(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


GOOD = {"template": "simt", "params": {"BM": 64}, "verified": True, "median_ms": 1.0}
BAD_ENTRIES = {
    "float32/NN/1x1x1": "a string",
    "float32/NN": GOOD,
    "axbxc": GOOD,
    "float32/NN/axbxc": GOOD,
    "float99/NN/2x2x2": GOOD,
    "float32/NN/3x3x3": {**GOOD, "params": "garbage"},
    "float32/NN/4x4x4": {**GOOD, "params": {"BM": [1, 2]}},
    "float32/NN/5x5x5": {k: v for k, v in GOOD.items() if k != "template"},
    "float32/NN/6x6x6": {**GOOD, "median_ms": "fast"},
    "float32/NN/7x7x7": {**GOOD, "verified": False},
    "float32/NN/08x8x8": GOOD,
}


def write_doc(path: Path, entries: dict, schema: int | None = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"entries": entries, "kernel": "gemm"} if schema is None else {"schema": schema, "entries": entries}
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("key", list(BAD_ENTRIES))
def test_a_bad_entry_is_skipped_with_one_warning_naming_file_and_key(path, key, caplog):
    write_doc(path, {key: BAD_ENTRIES[key], "float32/NN/64x64x64": GOOD})
    with caplog.at_level(logging.WARNING, logger="autotune.results.store"):
        first = read(path)
        second = read(path)  # read again (as every lookup does): no second warning
    assert list(first["entries"]) == list(second["entries"]) == ["float32/NN/64x64x64"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and str(path) in warnings[0] and repr(key) in warnings[0]


def test_a_merge_keeps_entries_it_cannot_read_and_replaces_a_bad_one_under_its_key(path, caplog):
    write_doc(path, {"float32/NN/1x1x1": "a string", "float32/NN/axbxc": GOOD})
    with caplog.at_level(logging.WARNING, logger="autotune.results.store"):
        merge(path, HEADER, "float32/NN/1x1x1", entry(1.0))
    stored = json.loads(path.read_text())["entries"]
    assert stored["float32/NN/axbxc"] == GOOD  # another version's entry is not ours to drop
    assert stored["float32/NN/1x1x1"]["median_ms"] == 1.0
    assert "'float32/NN/axbxc'" in caplog.text


def test_an_invalid_entry_is_refused_by_merge(path):
    with pytest.raises(ValueError, match="template is missing"):
        merge(path, HEADER, "float32/NN/1x1x1", {"verified": True, "median_ms": 1.0, "params": {}})
    with pytest.raises(ValueError, match="params.BM"):
        merge(path, HEADER, "float32/NN/1x1x1", entry(1.0, params={"BM": None}))
    with pytest.raises(ValueError, match="dtype/layout/shape"):
        merge(path, HEADER, "float32/1x1x1", entry(1.0))
    assert not path.exists()


def test_a_file_of_the_first_schema_is_migrated_on_read_and_written_with_the_version(path):
    old = {"template": "simt", "params": {"BM": 64, "DBUF": True}, "verified": True, "median_ms": 2.0,
           "template_hash": "0123456789abcdef", "source_hash": "fedcba9876543210", "tag": "kept"}  # fmt: skip
    for schema in (None, 1):
        write_doc(path, {"float32/NN/64x64x64": old}, schema)
        got = read(path)["entries"]["float32/NN/64x64x64"]
        assert {k: got[k] for k in old} == old and got["objective"] == ["time"]
        merge(path, HEADER, "float32/NN/32x32x32", entry(1.0))
        doc = json.loads(path.read_text())
        assert doc["schema"] == SCHEMA and doc["entries"]["float32/NN/64x64x64"]["source_hash"] == old["source_hash"]
    write_doc(path, {"float32/NN/64x64x64": old}, 1)
    assert migrate(path) and not migrate(path)
    assert json.loads(path.read_text())["schema"] == SCHEMA


def test_every_committed_entry_is_a_valid_record_of_the_current_schema():
    files = sorted((Path(__file__).resolve().parents[2] / "tuned").glob("*/*.json"))
    assert files
    for f in files:
        tf = load(f)
        raw = json.loads(f.read_text())["entries"]
        assert tf.schema == SCHEMA and not tf.rejected and tf.entries, f
        for key, e in tf.entries.items():  # the record keeps what serving is keyed by, byte for byte
            for name in ("template", "params", "template_hash", "source_hash"):
                assert json.dumps(e.to_json()[name]) == json.dumps(raw[key][name]), (f, key, name)


def _merge_many(path: Path, worker: int, count: int) -> None:
    for i in range(count):
        merge(path, HEADER, entry_key("float32", "NN", f"{worker + 1}x{i + 1}x7"), entry(1.0 + i))


def test_concurrent_merges_from_many_processes_lose_nothing(path):
    ctx = multiprocessing.get_context("fork")
    # Eight writers at once, each merge a read-modify-write of the whole file under the lock (a lost update shows
    # as a missing key). Each merge reads every entry so far, so the cost grows with the square of the merges:
    # 20 a writer keep all eight overlapping from start to end at a sixth of the time of 50.
    procs = [ctx.Process(target=_merge_many, args=(path, w, 20)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * 8
    entries = read(path)["entries"]
    assert len(entries) == 160
    assert set(entries) == {f"float32/NN/{w + 1}x{i + 1}x7" for w in range(8) for i in range(20)}


def test_concurrent_merges_from_threads_lose_nothing(path):
    threads = [threading.Thread(target=_merge_many, args=(path, w, 10)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(read(path)["entries"]) == 40


BIG = dict(BM=128, BN=256, BK=16, WM=64, WN=64, WNITER=4, TM=8, TN=4, VEC=4, PAD=4, DBUF=True)


def test_the_runtime_lookup_serves_past_bad_entries_and_falls_back_from_an_unreadable_file(tmp_path, caplog):
    from autotune.build.templates import template_hash
    from autotune.kernels import FAMILIES
    from autotune.serve.runtime import choose

    gemm = FAMILIES["gemm"]
    tuned = tmp_path / "tuned"
    path = tuned_file(tuned, "nvidia-h200-sm90", "gemm")
    good = {"template": "simt", "params": BIG, "verified": True, "median_ms": 1.0,
            "template_hash": template_hash("gemm", "simt")}  # fmt: skip
    write_doc(path, {**BAD_ENTRIES, "float32/NN/4096x4096x4096": good})
    with caplog.at_level(logging.WARNING):
        exact = choose("gemm", gemm.problem("4096x4096x4096", "float32"), "nvidia-h200-sm90", "sm_90", tuned)
        near = choose("gemm", gemm.problem("2000x3000x1000", "float32"), "nvidia-h200-sm90", "sm_90", tuned)
    assert (exact.step, exact.params) == ("exact", BIG) and (near.step, near.params) == ("nearest", BIG)
    assert caplog.text.count("skipped entry") == len(BAD_ENTRIES)
    path.write_bytes(b"\x00\xff" * 100)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        c = choose("gemm", gemm.problem("4096x4096x4096", "float32"), "nvidia-h200-sm90", "sm_90", tuned)
        other = choose("gemm", gemm.problem("64x64x64", "float32"), "nvidia-h200-sm90", "sm_90", tuned)
    assert c.step == other.step == "default" and "not a text file" in caplog.text
    assert caplog.text.count("serving without it") == 1
