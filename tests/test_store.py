"""tuned/ files: merge rules, atomic writes, corrupt files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import StoreError
from autotune.store import entry_key, merge, read, tuned_file

HEADER = {"kernel": "gemm", "gpu": {"name": "NVIDIA H200", "arch": "sm_90", "key": "nvidia-h200-sm90"}}


def entry(ms: float, **extra) -> dict:
    return {"verified": True, "median_ms": ms, "params": {"BM": 128}, **extra}


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
    assert [p.name for p in path.parent.iterdir()] == ["gemm.json"]


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not valid JSON"), ("[1, 2]", "no 'entries'"), ('{"schema": 99, "entries": {}}', "schema 99")],
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
