"""Tuning specs: the default spec loads, and every malformed spec is one SpecError naming file and key."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.core.errors import AutotuneError, SpecError
from autotune.kernels.gemm import SIMT_PARAMS
from autotune.tune.spec import Budget, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
GEMM_YAML = ROOT / "configs" / "gemm_simt.yaml"  # the simt space alone (gemm.yaml searches three templates)


@pytest.fixture(scope="module")
def base() -> dict:
    """configs/gemm_simt.yaml as plain data; tests mutate deep copies of it."""
    return yaml.safe_load(GEMM_YAML.read_text())


@pytest.fixture(scope="module")
def default_spec():
    return load_spec(GEMM_YAML)


def write(tmp_path: Path, raw, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw, sort_keys=False))
    return path


def expect_spec_error(path: Path, key: str, fragment: str) -> SpecError:
    """load_spec(path) fails with one line that starts '<path>: <key>:' and contains ``fragment``."""
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    msg = str(err)
    assert err.path == str(path)
    assert str(path) in msg
    if key:
        assert msg.startswith(f"{path}: {key}: "), msg
    assert fragment in msg, msg
    assert "\n" not in msg
    return err


# --- mutations of the default spec -------------------------------------------------------------------


def _walk(raw, keys):
    for k in keys:
        raw = raw[k]
    return raw


def put(*keys, value):
    def mutate(raw):
        _walk(raw, keys[:-1])[keys[-1]] = value

    return mutate


def drop(*keys):
    def mutate(raw):
        del _walk(raw, keys[:-1])[keys[-1]]

    return mutate


def both(*mutations):
    def mutate(raw):
        for m in mutations:
            m(raw)

    return mutate


def append_constraint(text):
    return lambda raw: raw["constraints"].append(text)


NO_START = drop("start_from")

# (id, mutation of configs/gemm_simt.yaml, the key the message must start with, a fragment it must contain)
MALFORMED = [
    ("unknown-top-level-key", put("kernal", value="gemm"), "kernal", "unknown key"),
    ("missing-kernel", drop("kernel"), "kernel", "is required"),
    ("kernel-not-a-string", put("kernel", value=5), "kernel", "expected a str"),
    ("unknown-kernel", put("kernel", value="conv3d"), "kernel", "unknown kernel family 'conv3d'"),
    ("missing-template", drop("template"), "template", "is required"),
    ("unknown-template", put("template", value="tensorcore"), "template", "unknown gemm template 'tensorcore'"),
    ("missing-dtype", drop("dtype"), "dtype", "is required"),
    ("unsupported-dtype", put("dtype", value="float16"), "dtype", "does not implement 'float16'"),
    ("missing-shapes", drop("shapes"), "shapes", "non-empty list"),
    ("empty-shapes", put("shapes", value=[]), "shapes", "non-empty list"),
    ("shapes-not-a-list", put("shapes", value="64x64x64"), "shapes", "non-empty list"),
    ("shape-negative", put("shapes", 1, value=[-1, 64, 64]), "shapes[1]", "got [-1, 64, 64]"),
    ("shape-zero", put("shapes", 2, value="0x64x64"), "shapes[2]", "got '0x64x64'"),
    ("shape-two-dims", put("shapes", 1, value=[64, 64]), "shapes[1]", "got [64, 64]"),
    ("shape-four-dims", put("shapes", 0, value="1x2x3x4"), "shapes[0]", "got '1x2x3x4'"),
    ("shape-axb", put("shapes", 1, value="axb"), "shapes[1]", "got 'axb'"),
    ("shape-float-dim", put("shapes", 1, value=[64, 64.5, 64]), "shapes[1]", "positive integers"),
    ("shape-bool-dim", put("shapes", 1, value=[True, 64, 64]), "shapes[1]", "positive integers"),
    ("shape-mapping", put("shapes", 5, value={"M": 1}), "shapes[5]", "positive integers"),
    ("duplicate-shapes", put("shapes", 2, value="4096x4096x4096"), "shapes", "lists the same shape twice"),
    ("missing-params", drop("params"), "params", "expected a mapping of parameter names"),
    ("params-a-list", put("params", value=["BM"]), "params", "expected a mapping of parameter names"),
    ("unknown-parameter", put("params", "BQ", value=[1, 2]), "params.BQ", "unknown parameter for this template"),
    ("missing-parameter", drop("params", "DBUF"), "params", "missing DBUF"),
    ("param-scalar", put("params", "BM", value=128), "params.BM", "expected a list of values"),
    ("param-string", put("params", "BM", value="16,32"), "params.BM", "expected a list of values"),
    ("param-empty-list", put("params", "BM", value=[]), "params.BM", "has no values"),
    ("param-duplicate-value", put("params", "BM", value=[16, 32, 16]), "params.BM", "lists a value twice"),
    ("param-nested-list", put("params", "BM", value=[[16]]), "params.BM", "numbers, strings or booleans"),
    ("param-null-value", put("params", "BM", value=[16, None]), "params.BM", "numbers, strings or booleans"),
    ("values-not-a-list", put("params", "BM", value={"values": 16}), "params.BM.values", "expected a list"),
    ("two-forms", put("params", "BM", value={"values": [16], "range": [16, 32]}), "params.BM", "exactly one"),
    ("no-form", put("params", "BM", value={"step": 2}), "params.BM", "exactly one"),
    ("param-unknown-key", put("params", "BM", value={"values": [16], "choices": [1]}), "params.BM.choices", "unknown"),
    (
        "range-low-above-high",
        put("params", "BM", value={"range": [64, 16]}),
        "params.BM.range",
        "low 64 is above high 16",
    ),
    ("range-one-bound", put("params", "BM", value={"range": [16]}), "params.BM.range", "[low, high] integers"),
    ("range-float-bound", put("params", "BM", value={"range": [16.0, 32]}), "params.BM.range", "[low, high] integers"),
    (
        "range-step-zero",
        put("params", "BM", value={"range": [16, 64], "step": 0}),
        "params.BM.step",
        "positive integer",
    ),
    ("range-too-wide", put("params", "BM", value={"range": [1, 100000]}), "params.BM.range", "more than 4096 values"),
    ("pow2-out-of-range", put("params", "BM", value={"pow2": [4, 63]}), "params.BM.pow2", "between 0 and 62"),
    ("pow2-low-above-high", put("params", "BM", value={"pow2": [8, 4]}), "params.BM.pow2", "low 8 is above high 4"),
    ("when-not-a-string", put("params", "PAD", value={"values": [0, 4], "when": 5}), "params.PAD.when", "expression"),
    (
        "when-unsafe",
        put("params", "PAD", value={"values": [0, 4], "when": "__import__('os').system('x')"}),
        "params.PAD.when",
        "calls something other than the allowed functions",
    ),
    (
        "when-non-parameter",
        put("params", "PAD", value={"values": [0, 4], "when": "QQ > 0"}),
        "params.PAD.when",
        "this template needs the parameter in every configuration",
    ),
    (
        "constraint-import",
        put("constraints", value=["__import__('os').system('x')"]),
        "constraints[0]",
        "calls something other than the allowed functions",
    ),
    (
        "constraint-import-later",
        append_constraint("__import__('os').system('x')"),
        "constraints[3]",
        "calls something other than the allowed functions",
    ),
    ("constraint-attribute", put("constraints", value=["BM.__class__ == 1"]), "constraints[0]", "uses Attribute"),
    ("constraint-lambda", put("constraints", value=["BM > 1", "(lambda: 1)"]), "constraints[1]", "uses Lambda"),
    ("constraint-syntax", put("constraints", value=["BM >"]), "constraints[0]", "cannot parse 'BM >'"),
    ("constraints-not-a-list", put("constraints", value="BM > 1"), "constraints", "list of expression strings"),
    ("constraint-not-a-string", put("constraints", value=[5]), "constraints", "list of expression strings"),
    ("constraint-non-parameter", append_constraint("QQ > 1"), "constraints[3]", "'QQ > 1' names QQ"),
    # The space is judged before start_from, so these blame the constraint (or params), not start_from[0].
    ("constraint-impossible", append_constraint("BM > 1000"), "constraints[3]", "'BM > 1000' holds for no values of"),
    (
        "constraints-impossible-together",
        both(append_constraint("BM > 100"), append_constraint("BM * 2 < 100")),
        "constraints",
        "satisfies the constraints together (each alone can hold)",
    ),
    (
        "constraint-divides-by-zero",
        append_constraint("BM // (WM - WM) > 0"),
        "constraints[3]",
        "'BM // (WM - WM) > 0' divides by zero",
    ),
    (
        "template-checks-impossible",  # VEC=16 never divides BK=8: the template's own check rejects everything
        both(put("params", "BK", value=[8]), put("params", "VEC", value=[16])),
        "constraints",
        "template's own checks (the first that meets the constraints, BM=16,BN=32,BK=8,",
    ),
    ("objective-unknown", put("objective", value="power"), "objective", "got 'power'"),
    ("objective-three", put("objective", value=["time", "energy", "power"]), "objective", "[time, energy]"),
    ("objective-twice", put("objective", value=["time", "time"]), "objective", "got ['time', 'time']"),
    ("objective-number", put("objective", value=3), "objective", "expected time, energy or [time, energy]"),
    (
        "multi-objective-sampler",
        both(put("objective", value=["time", "energy"]), put("sampler", value="cmaes")),
        "sampler",
        "'cmaes' cannot search two objectives; with objective [time, energy] use one of nsga2, tpe, random, brute",
    ),
    ("budget-trials-zero", put("budget", "trials", value=0), "budget.trials", "positive integer, got int 0"),
    ("budget-trials-negative", put("budget", "trials", value=-5), "budget.trials", "positive integer"),
    ("budget-trials-bool", put("budget", "trials", value=True), "budget.trials", "positive integer"),
    ("budget-trials-float", put("budget", "trials", value=2.5), "budget.trials", "positive integer"),
    ("budget-minutes-zero", put("budget", "minutes", value=0), "budget.minutes", "positive number"),
    ("budget-minutes-string", put("budget", "minutes", value="soon"), "budget.minutes", "positive number"),
    ("budget-empty", put("budget", value={}), "budget", "needs 'trials' or 'minutes'"),
    ("budget-nulls", put("budget", value={"trials": None, "minutes": None}), "budget", "needs 'trials' or 'minutes'"),
    ("budget-unknown-key", put("budget", "hours", value=1), "budget.hours", "unknown key"),
    ("budget-not-a-mapping", put("budget", value=60), "budget", "expected a mapping"),
    ("unknown-sampler", put("sampler", value="annealing"), "sampler", "got 'annealing'"),
    ("seed-negative", put("seed", value=-1), "seed", "an integer from 0 to 2**32 - 1"),
    ("seed-string", put("seed", value="x"), "seed", "an integer from 0 to 2**32 - 1"),
    ("seed-too-large", put("seed", value=2**32), "seed", "an integer from 0 to 2**32 - 1"),
    ("param-string-number", put("params", "BM", value=["128"]), "params.BM", "expected integers >= 1, got '128'"),
    ("param-zero", put("params", "WM", value=[0, 32]), "params.WM", "expected integers >= 1, got 0"),
    ("param-float", put("params", "BK", value=[8.0]), "params.BK", "expected integers >= 1, got 8.0"),
    ("param-negative-pad", put("params", "PAD", value=[-4, 0]), "params.PAD", "expected integers >= 0, got -4"),
    ("param-bool-as-string", put("params", "DBUF", value=["false"]), "params.DBUF", "expected true or false"),
    ("param-int-as-bool", put("params", "DBUF", value=[0, 1]), "params.DBUF", "expected true or false, got 0"),
    (
        "space-too-large",
        both(
            NO_START, put("params", "PAD", value={"range": [0, 4000]}), put("params", "BK", value={"range": [1, 4000]})
        ),
        "params",
        "combinations, more than",
    ),
    ("constraint-too-long", append_constraint("1 + " * 400 + "BM > 0"), "constraints[3]", "over 1000"),
    ("tolerance-above-one", put("verify", "tolerance", value=2), "verify.tolerance", "between 0 and 1"),
    ("tolerance-one", put("verify", "tolerance", value=1.0), "verify.tolerance", "between 0 and 1"),
    ("tolerance-zero", put("verify", "tolerance", value=0), "verify.tolerance", "between 0 and 1"),
    ("tolerance-negative", put("verify", "tolerance", value=-1e-5), "verify.tolerance", "between 0 and 1"),
    ("tolerance-bool", put("verify", "tolerance", value=True), "verify.tolerance", "between 0 and 1"),
    ("tolerance-word", put("verify", "tolerance", value="tight"), "verify.tolerance", "got 'tight'"),
    ("verify-not-a-mapping", put("verify", value=1e-5), "verify", "key 'tolerance'"),
    ("verify-unknown-key", put("verify", "atol", value=1), "verify", "key 'tolerance'"),
    (
        "start-breaks-constraint",
        put("start_from", 0, "BM", value=16),
        "start_from[0]",
        "breaks the constraint 'BM % WM == 0 and BN % WN == 0'",
    ),
    ("start-value-not-listed", put("start_from", 1, "BM", value=48), "start_from[1].BM", "48 is not among the values"),
    ("start-missing-param", drop("start_from", 0, "PAD"), "start_from[0]", "misses PAD"),
    ("start-extra-key", put("start_from", 0, "ZZ", value=1), "start_from[0].ZZ", "not a parameter"),
    ("start-not-a-list", put("start_from", value={"BM": 128}), "start_from", "list of parameter mappings"),
    ("start-entry-not-a-mapping", put("start_from", 1, value="BM=128"), "start_from[1]", "mapping"),
]


@pytest.mark.parametrize(("mutate", "key", "fragment"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_spec(tmp_path, base, mutate, key, fragment):
    raw = copy.deepcopy(base)
    mutate(raw)
    path = write(tmp_path, raw)
    expect_spec_error(path, key, fragment)


def test_malformed_cases_cover_distinct_keys():
    keys = {c[2] for c in MALFORMED}
    assert len(MALFORMED) >= 12
    assert {"params.BQ", "shapes[1]", "budget.trials", "sampler", "constraints[0]", "verify.tolerance"} <= keys
    assert {"start_from[0]", "start_from[1].BM", "constraints", "kernel", "template", "dtype"} <= keys


def test_error_carries_key_and_problem_separately(tmp_path, base):
    raw = copy.deepcopy(base)
    raw["budget"]["trials"] = 0
    path = write(tmp_path, raw)
    err = expect_spec_error(path, "budget.trials", "positive")
    assert err.key == "budget.trials"
    assert err.problem == "expected a positive integer, got int 0"
    assert str(err) == f"{path}: budget.trials: expected a positive integer, got int 0"
    assert isinstance(err, AutotuneError)


# --- malformed files -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        ("kernel: gemm\ntemplate: simt\n  dtype: float32\n", "line 3, column 8", "mapping values are not allowed here"),
        ("kernel: gemm\nshapes: [1, 2\n", "line 3, column 1", "expected ',' or ']'"),
        ("kernel: gemm\n\ttemplate: simt\n", "line 2, column 1", "cannot start any token"),
    ],
    ids=["bad-indent", "unclosed-list", "tab"],
)
def test_invalid_yaml_names_the_line(tmp_path, text, where, fragment):
    path = write(tmp_path, text)
    err = expect_spec_error(path, where, "is not valid YAML")
    assert fragment in str(err)
    assert err.key == where


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("- kernel: gemm\n- template: simt\n", "got list"),
        ("just a string\n", "got str 'just a string'"),
        ("42\n", "got int 42"),
        ("", "got nothing"),
        ("# only a comment\n", "got nothing"),
    ],
    ids=["list", "string", "number", "empty", "comment-only"],
)
def test_top_level_must_be_a_mapping(tmp_path, text, fragment):
    path = write(tmp_path, text)
    err = expect_spec_error(path, "", "expected a mapping of keys at the top level")
    assert fragment in str(err)
    assert str(err).startswith(f"{path}: expected a mapping")


def test_missing_file(tmp_path):
    path = tmp_path / "nope" / "missing.yaml"
    err = expect_spec_error(path, "", "file not found")
    assert str(err) == f"{path}: file not found"


def test_directory_instead_of_file(tmp_path):
    expect_spec_error(tmp_path, "", "cannot be read")


def test_parse_spec_default_path_and_custom_path(base):
    raw = copy.deepcopy(base)
    raw["sampler"] = "annealing"
    with pytest.raises(SpecError, match=r"^<spec>: sampler: "):
        parse_spec(raw)
    with pytest.raises(SpecError, match=r"^somewhere\.yaml: sampler: "):
        parse_spec(raw, "somewhere.yaml")


def test_simt_params_under_the_naive_template_are_unknown(tmp_path, base):
    raw = copy.deepcopy(base)
    raw["template"] = "naive"
    path = write(tmp_path, raw)
    # The first unknown name in sorted order is reported.
    expect_spec_error(path, f"params.{sorted(SIMT_PARAMS)[0]}", "it takes BX, BY")


# --- the default spec and valid variants -----------------------------------------------------------------


def test_default_spec_loads(default_spec):
    s = default_spec
    assert s.kernel == "gemm"
    assert s.template == "simt"
    assert s.dtype == "float32"
    assert len(s.problems) == 6
    assert [p.label for p in s.problems] == [
        "4096x4096x4096",
        "8192x8192x8192",
        "4095x4097x4093",
        "1000x1000x1000",
        "16x4096x4096",
        "128x4096x4096",
    ]
    assert all(p.dtype == "float32" for p in s.problems)
    assert s.sampler == "tpe"
    assert s.objective == "time"
    assert s.budget == Budget(trials=120, minutes=0.75)
    assert s.seed == 0
    assert s.tolerance == pytest.approx(1e-5)
    assert s.space.names == SIMT_PARAMS
    assert len(s.space.constraints) == 3
    assert len(s.start_from) == 2
    assert s.start_from[0].as_dict()["DBUF"] is True
    assert s.path == str(GEMM_YAML)
    assert s.name == "gemm_simt"


def test_default_spec_is_frozen(default_spec):
    with pytest.raises(dataclasses.FrozenInstanceError):
        default_spec.sampler = "random"  # type: ignore[misc]


def test_parse_spec_accepts_the_parsed_default(base):
    spec = parse_spec(copy.deepcopy(base))
    assert spec.path == "<spec>"
    assert spec.kernel == "gemm" and len(spec.problems) == 6


def _load_variant(tmp_path, base, mutate):
    raw = copy.deepcopy(base)
    mutate(raw)
    return load_spec(write(tmp_path, raw))


def test_optional_keys_take_their_defaults(tmp_path, base):
    def strip(raw):
        for k in ("objective", "budget", "sampler", "seed", "verify", "start_from", "constraints"):
            raw.pop(k)

    s = _load_variant(tmp_path, base, strip)
    assert s.objective == "time"
    assert s.budget == Budget(trials=50, minutes=None)
    assert s.sampler == "tpe"
    assert s.seed == 0
    assert s.tolerance is None
    assert s.start_from == ()
    assert s.space.constraints == ()


def test_param_forms_range_pow2_values(tmp_path, base):
    def forms(raw):
        raw["params"]["BM"] = {"pow2": [4, 7]}
        raw["params"]["BK"] = {"range": [8, 32], "step": 8}
        raw["params"]["PAD"] = {"values": [0, 4]}
        raw["params"]["VEC"] = {"range": [1, 4], "step": 3}

    s = _load_variant(tmp_path, base, forms)
    values = {p.name: p.values for p in s.space.params}
    assert values["BM"] == (16, 32, 64, 128)
    assert values["BK"] == (8, 16, 24, 32)
    assert values["PAD"] == (0, 4)
    assert values["VEC"] == (1, 4)


def test_string_shapes_and_quoted_tolerance(tmp_path, base):
    def mutate(raw):
        raw["shapes"] = [" 64 x 32 x 16 ", "128x128x128", [1, 2, 3]]
        raw["verify"]["tolerance"] = "1e-4"  # YAML 1.1 reads an unquoted 1e-4 as a string too

    s = _load_variant(tmp_path, base, mutate)
    assert [p.label for p in s.problems] == ["64x32x16", "128x128x128", "1x2x3"]
    assert (s.problems[0].M, s.problems[0].N, s.problems[0].K) == (64, 32, 16)
    assert s.tolerance == pytest.approx(1e-4)


def test_budget_minutes_only_and_other_sampler(tmp_path, base):
    def mutate(raw):
        raw["budget"] = {"minutes": 2}
        raw["sampler"] = "random"

    s = _load_variant(tmp_path, base, mutate)
    assert s.budget == Budget(trials=None, minutes=2.0)
    assert isinstance(s.budget.minutes, float)
    assert s.sampler == "random"


def test_naive_template_spec(tmp_path):
    text = (
        "kernel: gemm\ntemplate: naive\ndtype: float32\nshapes: ['256x256x256']\n"
        "params:\n  BX: [8, 16, 32]\n  BY: {pow2: [3, 5]}\nconstraints: ['BX * BY <= 256']\n"
    )
    s = load_spec(write(tmp_path, text))
    assert s.template == "naive"
    assert s.space.names == ("BX", "BY")
    assert {c.key for c in s.space.enumerate()} == {
        f"BX={x},BY={y}" for x in (8, 16, 32) for y in (8, 16, 32) if x * y <= 256
    }


# --- the CLI reports spec errors in one line ------------------------------------------------------------


def _run_cli(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _assert_one_error_line(rc, out, err):
    assert isinstance(rc, int) and rc != 0
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("autotune: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (put("sampler", value="annealing"), "sampler"),
        (put("params", "BQ", value=[1]), "params.BQ"),
        (put("constraints", value=["__import__('os').system('x')"]), "constraints[0]"),
        (put("budget", "trials", value=0), "budget.trials"),
    ],
    ids=["sampler", "unknown-param", "unsafe-constraint", "budget"],
)
def test_cli_reports_a_bad_spec_in_one_line(tmp_path, base, capsys, mutate, key):
    raw = copy.deepcopy(base)
    mutate(raw)
    path = write(tmp_path, raw)
    rc, out, err = _run_cli(["run", str(path)], capsys)
    line = _assert_one_error_line(rc, out, err)
    assert rc == SpecError.exit_code
    assert line.startswith(f"autotune: error: {path}: {key}: ")
    assert out == ""


def test_cli_reports_invalid_yaml_in_one_line(tmp_path, capsys):
    path = write(tmp_path, "kernel: gemm\nshapes: [1, 2\n")
    line = _assert_one_error_line(*_run_cli(["run", str(path)], capsys))
    assert f"{path}: line 3, column" in line


def test_cli_reports_a_missing_spec_in_one_line(tmp_path, capsys):
    path = tmp_path / "missing.yaml"
    line = _assert_one_error_line(*_run_cli(["run", str(path)], capsys))
    assert line == f"autotune: error: {path}: file not found"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--trials", "0"], "--trials must be a positive number, got 0"),
        (["--trials", "-3"], "--trials must be a positive number, got -3"),
        (["--minutes", "0"], "--minutes must be a positive number"),
        (["--jobs", "0"], "--jobs must be a positive number"),
        (["--arch", "sm_90"], "--arch only applies with --compile-only"),
        (["--minutes", "nan"], "--minutes must be a positive number"),
        (["--timeout", "inf"], "--timeout must be a positive number"),
        (["--abort-ratio", "nan"], "--abort-ratio"),
        (["--limit", "3"], "--limit only applies with --compile-only"),
    ],
    ids=[
        "trials-0",
        "trials-negative",
        "minutes-0",
        "jobs-0",
        "arch-without-compile-only",
        "minutes-nan",
        "timeout-inf",
        "abort-ratio-nan",
        "limit-without-compile-only",
    ],  # fmt: skip
)
def test_cli_rejects_bad_overrides(capsys, extra, fragment):
    rc, out, err = _run_cli(["run", str(GEMM_YAML), *extra], capsys)
    line = _assert_one_error_line(rc, out, err)
    assert fragment in line


def test_cli_trials_zero_with_relative_path(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc, out, err = _run_cli(["run", "configs/gemm_simt.yaml", "--trials", "0"], capsys)
    line = _assert_one_error_line(rc, out, err)
    assert line == "autotune: error: --trials must be a positive number, got 0"


@pytest.mark.parametrize(
    ("objective", "sampler", "objectives", "expected_sampler"),
    [
        ("time", None, ("time",), "tpe"),
        ("energy", None, ("energy",), "tpe"),
        (["time", "energy"], None, ("time", "energy"), "nsga2"),
        (["energy", "time"], "tpe", ("time", "energy"), "tpe"),  # values are always [ms, J]
        (["energy"], "random", ("energy",), "random"),
    ],
)
def test_objective_time_energy_or_both(base, objective, sampler, objectives, expected_sampler):
    raw = copy.deepcopy(base)
    raw["objective"] = objective
    raw.pop("sampler", None)
    if sampler:
        raw["sampler"] = sampler
    s = parse_spec(raw)
    assert s.objectives == objectives and s.sampler == expected_sampler
    assert s.measures_energy == ("energy" in objectives)


def test_the_cli_sampler_must_take_the_objective(tmp_path, base, capsys):
    raw = copy.deepcopy(base)
    raw["objective"] = ["time", "energy"]
    path = write(tmp_path, raw)
    assert main(["run", str(path), "--sampler", "cmaes"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autotune: error: --sampler 'cmaes' cannot search two objectives") and "\n" not in err


# --- hostile or mistaken YAML: refused in one sentence, before anything large is built ------------------------

GEMM_TEXT = GEMM_YAML.read_text()


def _billion_laughs(indent: str = "  ") -> str:
    """Nine levels of ten aliases each: 10**9 strings of 198 characters once expanded, from 2.6 KB of text."""
    lines = [f"{indent}a0: &a0 [" + ", ".join(['"' + "lol" * 66 + '"'] * 10) + "]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"{indent}a{i}: &a{i} [{refs}]")
    return "\n".join(lines)


def test_billion_laughs_in_budget_is_refused_in_well_under_a_second(tmp_path):
    import time

    text = GEMM_TEXT.replace("budget:                   # per shape, whichever comes first\n",
                             "budget:\n" + _billion_laughs() + "\n")  # fmt: skip
    assert "a9:" in text and 2500 < len(_billion_laughs()) < 2700
    path = write(tmp_path, text)
    start = time.perf_counter()
    err = expect_spec_error(path, "budget.a5", "expands through YAML aliases to more than 200,000 values")
    assert time.perf_counter() - start < 0.5
    assert len(str(err)) < 300


def test_alias_loops_and_deep_nesting_are_refused(tmp_path):
    expect_spec_error(write(tmp_path, "kernel: gemm\nbudget: &b {trials: *b}\n", "loop.yaml"), "budget.trials",
                      "contains itself through a YAML alias")  # fmt: skip
    deep = "kernel: gemm\nshapes: " + "[" * 5000 + "]" * 5000 + "\n"
    expect_spec_error(write(tmp_path, deep, "deep.yaml"), "line 2", "nests collections more than 50 deep")


def test_moderate_aliases_still_load(tmp_path):
    text = GEMM_TEXT.replace("  BM: [16, 32, 64, 128, 256]", "  BM: &tiles [16, 32, 64, 128, 256]").replace(
        "  BN: [32, 64, 128, 256]", "  BN: *tiles"
    )
    assert "*tiles" in text
    spec = load_spec(write(tmp_path, text))
    assert next(p for p in spec.space.params if p.name == "BN").values == (16, 32, 64, 128, 256)


@pytest.mark.parametrize(
    ("old", "new", "key", "lines"),
    [
        ("seed: 0\n", "seed: 0\nseed: 1\n", "seed", "on lines"),
        ("  TN: [4, 8] ", "  TN: [4, 8]\n  TM: [4, 8, 16]", "params.TM", "on lines"),
        ("  trials: 120\n", "  trials: 120\n  trials: 12\n", "budget.trials", "on lines"),
        ("kernel: gemm\n", "kernel: gemm\n'kernel': gemm\n", "kernel", "on lines"),  # quoted: the same key
        ("start_from:  ", "start_from:\n  - {BM: 128, BM: 64}\nx_start_from:", "start_from[0].BM", "on lines"),
    ],
    ids=["top-level", "params", "nested", "quoted", "inside-a-list"],
)
def test_duplicate_keys_are_refused_naming_the_key_and_its_lines(tmp_path, old, new, key, lines):
    assert old in GEMM_TEXT
    path = write(tmp_path, GEMM_TEXT.replace(old, new, 1))
    err = expect_spec_error(path, key, "is given twice in one mapping, on lines ")
    first, second = (int(n) for n in str(err).split("on lines ")[1].split(";")[0].split(" and "))
    text = path.read_text().splitlines()
    leaf = key.split(".")[-1].split("[")[0]
    assert leaf in text[second - 1] and first <= second


def test_a_merge_key_may_be_overridden(tmp_path):
    text = GEMM_TEXT.replace("budget:                   # per shape, whichever comes first\n",
                             "defaults: &d {trials: 5, minutes: 1}\nbudget:\n  <<: *d\n")  # fmt: skip
    raw = __import__("autotune.core.safe_yaml", fromlist=["load_yaml"]).load_yaml(text)
    assert raw["budget"] == {"trials": 120, "minutes": 0.75}  # the mapping's own keys win, as YAML says


def test_an_integer_of_thousands_of_digits_is_one_sentence(tmp_path):
    expect_spec_error(write(tmp_path, "seed: " + "7" * 5000 + "\n"), "line 1", "an integer of 5000 digits")
    err = expect_spec_error(write(tmp_path, "seed: " + "7" * 4000 + "\n" + GEMM_TEXT.replace("seed: 0\n", "")),
                            "seed", "expected an integer")  # fmt: skip
    assert len(str(err)) < 300


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (put("budget", value=list(range(100_000))), "budget"),
        (put("objective", value=["x" * 10**6]), "objective"),
        (put("sampler", value="s" * 10**6), "sampler"),
        (put("shapes", 0, value=list(range(50_000))), "shapes[0]"),
        (put("params", "BM", value=[[1] * 50_000]), "params.BM"),
        (put("start_from", 0, "BM", value="b" * 10**6), "start_from[0].BM"),
        (put("kernel", value="k" * 10**6), "kernel"),
    ],
)
def test_messages_about_huge_values_stay_short(base, mutate, key):
    raw = copy.deepcopy(base)
    mutate(raw)
    with pytest.raises(SpecError) as info:
        parse_spec(raw, "big.yaml")
    assert str(info.value).startswith(f"big.yaml: {key}: ") and len(str(info.value)) < 400


# --- each error names the key that is really wrong, start_from or not ---------------------------------------


def test_an_empty_space_blames_the_constraint_not_start_from(tmp_path):
    path = write(tmp_path, GEMM_TEXT.replace("constraints:", "constraints:\n  - BM > 512", 1))
    expect_spec_error(path, "constraints[0]", "'BM > 512' holds for no values of BM")


def test_a_constraint_that_cannot_be_evaluated_is_blamed_with_start_from_present(base):
    raw = copy.deepcopy(base)
    raw["constraints"].append("BN // (WN - 64) > -1000 if BN == 256 else True")
    with pytest.raises(SpecError) as info:
        parse_spec(raw, "s.yaml")
    assert str(info.value).startswith("s.yaml: constraints[3]: ") and "divides by zero" in str(info.value)


# --- a space of millions with nothing feasible is refuted fast ----------------------------------------------


def test_an_infeasible_space_of_millions_is_refused_in_about_a_second(base):
    import time

    raw = copy.deepcopy(base)
    raw.pop("start_from")
    raw["params"] = {
        "BM": [32, 64, 128, 256], "BN": [16, 32, 64, 128, 256], "BK": [8, 16, 32, 64], "WM": [16, 32, 64, 128],
        "WN": [16, 32, 64, 128], "WNITER": [1, 2, 4, 8, 16, 32], "TM": [1, 2, 4, 8], "TN": [1, 2, 4, 8],
        "VEC": [1, 2, 4, 8], "PAD": [0, 1, 2, 4, 8], "DBUF": [False, True],
    }  # fmt: skip
    raw["constraints"] = [
        "BM % WM == 0 and BN % WN == 0",
        "BM * WM > 4096 * (2 if DBUF else 1)",  # read last by declaration order: DBUF
        "(BM // WM) * (BN // WN) * 32 <= 512",
        "BM // WM >= 16 or PAD > 8 * (1 + DBUF)",  # only BM=256, WM=16 (BM * WM = 4096): read last, DBUF
    ]
    spec_size = 1
    for v in raw["params"].values():
        spec_size *= len(v)
    assert spec_size == 4_915_200
    start = time.perf_counter()
    with pytest.raises(SpecError) as info:
        parse_spec(raw, "big.yaml")
    elapsed = time.perf_counter() - start
    assert "no configuration of params satisfies the constraints together" in str(info.value)
    assert elapsed < 1.5, elapsed


# --- problem sizes: what the kernels' indexing addresses, and what a run holds on the device ------------------


@pytest.mark.parametrize(
    ("kernel", "shape", "dtype", "message"),
    [
        ("gemm", [2_000_000_000] * 3, "float32", "the gemm kernels index with int coordinates and 64-bit (size_t)"),
        ("gemm", "2000000000x2000000000x2000000000", "float32", "A would hold 4e+18 float32 elements"),
        ("gemm", [3_000_000_000, 64, 64], "float32", "32-bit indices"),
        ("conv2d", [2**30, 2**30, 2**30, 2**30, 1, 1, 1, 1, 0], "float32", "64-bit (long long) offsets"),
    ],
)
def test_problems_beyond_the_kernels_indexing_are_refused(kernel, shape, dtype, message):
    from autotune.kernels import FAMILIES

    with pytest.raises(ValueError, match=re.escape(message)):
        FAMILIES[kernel].problem(shape, dtype)


def test_a_2e9_cubed_gemm_spec_names_the_shape(tmp_path):
    path = write(tmp_path, GEMM_TEXT.replace("  - [4096, 4096, 4096]\n", "  - [2000000000, 2000000000, 2000000000]\n"))
    expect_spec_error(path, "shapes[0]", "more than 2**63 bytes")


@pytest.mark.parametrize(("m", "n", "k"), [(2, 3, 4), (4096, 4096, 4096), (1, 50_000, 7)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_gemm_problem_counts_the_device_bytes_a_run_holds(m, n, k, dtype):
    from autotune.kernels.gemm import GEMM

    p = GEMM.problem([m, n, k], dtype)
    es = 4 if dtype == "float32" else 2
    stored = (m * k + k * n + 2 * m * n) * es  # A, B, C and the vendor's C
    reference = (m * k + k * n + m * n) * 8  # float64 A, B and C
    assert p.device_bytes == stored + reference
    assert p.device_bytes > p.bytes


def test_a_conv_problem_counts_the_device_bytes_a_run_holds():
    from autotune.kernels.conv import CONV

    p = CONV.problem({"N": 2, "C": 3, "H": 8, "W": 8, "K": 4, "R": 3, "S": 3, "stride": 1, "pad": 1}, "float16")
    x, w, y, padded = 2 * 3 * 8 * 8, 4 * 3 * 3 * 3, 2 * 4 * 8 * 8, 2 * 3 * 10 * 10
    assert p.device_bytes == (x + w + 2 * y) * 2 + (x + padded + w + 2 * y) * 8


def test_load_yaml_reads_every_shipped_config_as_safe_load_does():
    from autotune.core.safe_yaml import load_yaml

    files = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(files) >= 5
    for f in files:
        assert load_yaml(f.read_text()) == yaml.safe_load(f.read_text()), f


@pytest.mark.parametrize("text", ["!!python/object/apply:os.system ['true']", "x: !!python/name:os.system"])
def test_load_yaml_keeps_safe_load_semantics(text):
    from autotune.core.safe_yaml import load_yaml

    with pytest.raises(yaml.constructor.ConstructorError, match="could not determine a constructor"):
        load_yaml(text)


def test_every_shipped_config_parses_start_points_and_all():
    """Each spec in configs/ loads as `autotune run` loads it: its space, constraints and start points agree."""
    from autotune.tune.spec import load_spec

    files = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(files) >= 5
    for f in files:
        spec = load_spec(f)  # raises SpecError naming the file and the key that is wrong
        assert spec.problems and spec.kernel, f
