"""StudyKey: the one place study names are built and parsed; names of existing journals stay byte-identical."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path

import pytest

from autotune.build.templates import template_hash
from autotune.core.study_key import StudyKey
from autotune.kernels import FAMILIES
from autotune.tune.search import study_name
from autotune.tune.spec import load_spec

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = DATA.parent.parent


def recorded_names() -> list[str]:
    """Study names as real runs wrote them: every study of the recorded journal, every tuned entry's study."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "j.journal"
        shutil.copyfile(DATA / "recorded.journal", copy)  # the backend wants to write a lock beside it
        names = [s.study_name for s in JournalStorage(JournalFileBackend(str(copy))).get_all_studies()]
    for path in sorted((DATA / "tuned").rglob("*.json")):
        names += [e["study"] for e in json.loads(path.read_text())["entries"].values() if e.get("study")]
    return sorted(set(names))


def test_recorded_names_parse_and_build_back_byte_for_byte():
    names = recorded_names()
    assert len(names) >= 6
    for name in names:
        key = StudyKey.parse(name)
        assert key is not None and key.name == name, name
        assert key.kernel in FAMILIES and key.space_digest is None  # recorded before spaces were hashed
        assert FAMILIES[key.kernel].problem(key.shape_label, key.dtype, key.layout).label == key.shape_label


@pytest.mark.parametrize(
    "key, name",
    [
        (
            StudyKey("gemm", "simt", "float32", "16x4096x4096", "NN", "34107aaa"),
            "gemm.simt.float32.16x4096x4096.34107aaa",
        ),
        (
            StudyKey("gemm", "auto", "float16", "255x257x253", "TN", "aab5e728", "4b4eb4"),
            "gemm.auto.float16.255x257x253.TN.aab5e728.4b4eb4",
        ),
        (
            StudyKey("conv2d", "direct", "float32", "n1c64h56w56k64r3s3u1p1", "NCHW", "ab12cd34", "ef56aa"),
            "conv2d.direct.float32.n1c64h56w56k64r3s3u1p1.NCHW.ab12cd34.ef56aa",
        ),
    ],
)
def test_the_name_format_of_existing_journals(key, name):
    assert key.name == name and StudyKey.parse(name) == key


def test_names_of_every_shipped_config_are_built_through_the_key():
    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        spec = load_spec(path)
        for problem in spec.problems:
            key = StudyKey.parse(study_name(spec, problem))
            assert key is not None, path
            assert (key.kernel, key.template, key.dtype, key.shape_label, key.layout) == (
                spec.kernel, spec.template, problem.dtype, problem.label, problem.layout,
            )  # fmt: skip
            assert key.template_hash8 == template_hash(spec.kernel, spec.template)[:8]
            assert key.space_digest is not None and len(key.space_digest) == 6


def _token(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_random_keys_round_trip():
    rng = random.Random(23)
    word = "abcdefghijklmnopqrstuvwxyz0123456789_"
    for _ in range(500):
        key = StudyKey(
            _token(rng, word, rng.randint(1, 8)),
            _token(rng, word, rng.randint(1, 12)),
            rng.choice(["float32", "float16", "bfloat16", "tfloat32"]),
            _token(rng, "0123456789xnchwkrsup", rng.randint(1, 24)),
            rng.choice(["NN", "NT", "TN", "TT", "NCHW", "NHWC"]),
            _token(rng, "0123456789abcdef", 8),
            rng.choice([None, _token(rng, "0123456789abcdef", 6)]),
        )
        assert StudyKey.parse(key.name) == key, key.name


@pytest.mark.parametrize(
    "name",
    ["", "my-study", "gemm.simt.float32", "gemm.simt.float32.16x16x16", "gemm.simt.float32.16x16x16.NN.34107aaa",
     "gemm.simt.float32.16x16x16.34107aaa.", "gemm.simt.float32.16x16x16.NOTHEX"],
)  # fmt: skip
def test_names_we_do_not_build_are_none(name):
    assert StudyKey.parse(name) is None


def test_the_key_is_frozen():
    key = StudyKey("gemm", "simt", "float32", "16x16x16", "NN", "34107aaa")
    with pytest.raises(AttributeError):
        key.layout = "TN"  # type: ignore[misc]
