"""The safe constraint evaluator: what it computes, what it refuses, and that it never calls eval."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from autotune.core.errors import AutotuneError, ConstraintError
from autotune.core.expr import FUNCTIONS, Expression

ROOT = Path(__file__).resolve().parents[2]

VALUES = {"BM": 128, "BN": 64, "WM": 32, "TM": 8, "MODE": "fast", "DBUF": True}


def ev(text: str, values: dict | None = None):
    return Expression(text).evaluate(VALUES if values is None else values)


# --- what it computes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("BM - BN", 64),
        ("BM * BN", 8192),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("2 ** 10", 1024),
        ("2 ** 64", 2**64),
        ("-BM", -128),
        ("+BN", 64),
        ("BM // WM * (BN // 32) * 32", 256),
        ("1.5 * 2", 3.0),
        ("'ab' + 'c'", "abc"),
    ],
)
def test_arithmetic(text, expected):
    result = ev(text)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("BM == 128", True),
        ("BM == 64", False),
        ("BM != 64", True),
        ("BN < BM", True),
        ("BM < BN", False),
        ("BM <= 128", True),
        ("BM > 128", False),
        ("BM >= 128", True),
        ("MODE == 'fast'", True),
        ("BM in (64, 128)", True),
        ("BM in [16, 32]", False),
        ("BM not in (16, 32)", True),
        ("DBUF == True", True),
    ],
)
def test_comparisons(text, expected):
    assert ev(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16 <= BM <= 256", True),
        ("16 <= BM <= 64", False),
        ("BN < BM < 256", True),
        ("BM > BN > WM > TM", True),
        ("BM > BN > WM > 64", False),
        ("3 > 2 > 2", False),
        ("1 < 2 == 2", True),
    ],
)
def test_chained_comparisons(text, expected):
    assert ev(text) is expected


def test_chained_comparison_stops_at_the_first_false_link():
    # Python semantics: 1 // 0 is never evaluated once BM < 0 is false.
    assert ev("BM < 0 < 1 // 0") is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("BM > 64 and BN > 32", True),
        ("BM > 64 and BN > 64", False),
        ("BM > 256 or BN == 64", True),
        ("BM > 256 or BN > 64", False),
        ("not BM > 256", True),
        ("not DBUF", False),
        ("BM % WM == 0 and BN % WM == 0 and not BM < BN", True),
        ("(BM > 256 or BN == 64) and not (TM == 4)", True),
    ],
)
def test_boolean_logic(text, expected):
    assert ev(text) == expected


def test_and_or_short_circuit():
    # The right operand would divide by zero if it were evaluated.
    assert not ev("BM > 1000 and 1 // 0 == 0")
    assert ev("BM > 0 or 1 // 0 == 0")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("BM if BM > BN else BN", 128),
        ("BM if BM < BN else BN", 64),
        ("1 if MODE == 'fast' else 2", 1),
        ("7 if 0 else 1 // 0 if 0 else 3", 3),
    ],
)
def test_ternary(text, expected):
    assert ev(text) == expected


def test_ternary_evaluates_only_the_chosen_branch():
    assert ev("1 // 0 if BM < 0 else 5") == 5
    assert ev("5 if BM > 0 else 1 // 0") == 5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("min(BM, BN)", 64),
        ("min(BM, BN, 16)", 16),
        ("max(BM, BN)", 128),
        ("max(3, 9, 4)", 9),
        ("abs(BN - BM)", 64),
        ("ceil(BM / 48)", 3),
        ("floor(BM / 48)", 2),
        ("log2(BM)", 7.0),
        ("gcd(BM, 48)", 16),
        ("is_pow2(BM)", True),
        ("is_pow2(96)", False),
        ("is_pow2(1)", True),
        ("is_pow2(0)", False),
        ("is_pow2(-4)", False),
        ("is_pow2(4.0)", False),
        ("min(BM, BN) >= 32 and is_pow2(BN)", True),
    ],
)
def test_allowed_functions(text, expected):
    result = ev(text)
    assert result == expected
    assert type(result) is type(expected)


def test_function_whitelist_is_exactly_the_documented_set():
    assert set(FUNCTIONS) == {"min", "max", "abs", "ceil", "floor", "log2", "gcd", "is_pow2"}


def test_module_docstring_example():
    assert Expression("BM % WM == 0 and min(BM, BN) >= 32").evaluate({"BM": 128, "WM": 64, "BN": 64}) is True


def test_surrounding_whitespace_and_newlines_are_ignored():
    # YAML block scalars leave a trailing newline; leading indentation would be a SyntaxError without strip().
    assert Expression("  BM > 1\n").evaluate({"BM": 2}) is True


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("BM % WM == 0 and min(BM, BN) >= 32", {"BM", "WM", "BN"}),
        ("1 + 2 < 4", set()),
        ("max(TM, TN) * WNITER if DBUF else 0", {"TM", "TN", "WNITER", "DBUF"}),
        ("is_pow2(BM) and log2(BN) > ceil(BK)", {"BM", "BN", "BK"}),
        ("MODE == 'BM'", {"MODE"}),
    ],
)
def test_names_are_the_parameters_read_not_functions_or_strings(text, names):
    e = Expression(text)
    assert e.names == frozenset(names)
    assert isinstance(e.names, frozenset)


def test_expression_is_frozen_and_compares_by_text():
    e = Expression("BM > 1")
    assert e == Expression("BM > 1")
    assert e != Expression("BM > 2")
    assert hash(e) == hash(Expression("BM > 1"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.text = "1"  # type: ignore[misc]


# --- rejected when constructed --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("BM.__class__", "Attribute"),
        ("BM.real > 1", "Attribute"),
        ("(1).__class__.__bases__", "Attribute"),
        ("BM[0]", "Subscript"),
        ("(1, 2)[0] == 1", "Subscript"),
        ("lambda: 1", "Lambda"),
        ("[x for x in (1, 2)]", "ListComp"),
        ("{x for x in (1, 2)}", "SetComp"),
        ("{x: 1 for x in (1, 2)}", "DictComp"),
        ("sum(x for x in (1, 2))", "allowed functions"),
        ("any(x for x in (1, 2))", "allowed functions"),
        ("(x for x in (1, 2))", "GeneratorExp"),
        ("(y := 5)", "NamedExpr"),
        ("f'{BM}'", "JoinedStr"),
        ("f'x' == 'x'", "JoinedStr"),
        ("{1: 2}", "Dict"),
        ("{1, 2}", "Set"),
        ("BM << 2", "LShift"),
        ("BM & 1", "BitAnd"),
        ("BM @ BN", "MatMult"),
        ("~BM", "Invert"),
        ("BM is 1", "Is"),
        ("min(*BM)", "Starred"),
        ("(yield)", "Yield"),
    ],
)
def test_disallowed_syntax_is_rejected_naming_the_node(text, fragment):
    with pytest.raises(ConstraintError) as info:
        Expression(text)
    msg = str(info.value)
    assert fragment in msg
    assert repr(text) in msg


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        "__import__('os').system('x')",
        "eval('1')",
        "exec('1')",
        "open('x')",
        "compile('1', 'f', 'eval')",
        "getattr(BM, 'x')",
        "globals()",
        "int('3') == 3",
        "BM(1)",
        "(lambda: 0)()",
        "min.__call__(1, 2)",
        "dict(a=1)",
    ],
)
def test_calls_of_anything_but_the_whitelist_are_rejected(text):
    with pytest.raises(ConstraintError) as info:
        Expression(text)
    msg = str(info.value)
    assert "calls something other than the allowed functions" in msg
    assert "min" in msg and "is_pow2" in msg  # it lists what is allowed
    assert repr(text) in msg


def test_keyword_arguments_are_rejected():
    with pytest.raises(ConstraintError, match="keyword arguments"):
        Expression("min(BM, BN, key=abs)")
    with pytest.raises(ConstraintError, match="keyword arguments"):
        Expression("max(BM, default=0)")


@pytest.mark.parametrize("text", ["__builtins__", "__class__ == 1", "BM + __x", "min(__import__, 1)"])
def test_dunder_names_are_rejected(text):
    with pytest.raises(ConstraintError) as info:
        Expression(text)
    assert "dunder names are not allowed" in str(info.value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("None", "None"), ("b'x' == 1", "b'x'"), ("1j", "1j"), ("...", "Ellipsis")],
)
def test_non_number_constants_are_rejected(text, fragment):
    with pytest.raises(ConstraintError) as info:
        Expression(text)
    msg = str(info.value)
    assert "not a number or string" in msg
    assert fragment in msg


@pytest.mark.parametrize("text", ["BM >", "BM ==== 1", "", "   ", "(BM", "BM = 1", "import os", "BM if 1 else"])
def test_syntax_errors_are_constraint_errors(text):
    with pytest.raises(ConstraintError) as info:
        Expression(text)
    msg = str(info.value)
    assert msg.startswith("cannot parse")
    assert repr(text) in msg
    assert info.value.__cause__ is None  # raised "from None": no SyntaxError chained for the user


def test_constraint_error_is_an_autotune_error():
    # The CLI reports AutotuneErrors without a traceback.
    assert issubclass(ConstraintError, AutotuneError)


# --- errors found while evaluating ---------------------------------------------------------------


def test_unknown_name_at_evaluation():
    e = Expression("BM > QQ")
    assert e.names == {"BM", "QQ"}
    with pytest.raises(ConstraintError) as info:
        e.evaluate({"BM": 1})
    msg = str(info.value)
    assert "'QQ'" in msg
    assert "not a parameter" in msg


def test_function_name_used_as_a_value_is_not_a_parameter():
    with pytest.raises(ConstraintError, match="'min'.*not a parameter"):
        Expression("min + 1").evaluate({})


@pytest.mark.parametrize("text", ["BM / 0", "BM // 0", "BM % 0", "1 / (BM - BM)", "2.0 / 0.0"])
def test_division_by_zero(text):
    with pytest.raises(ConstraintError) as info:
        Expression(text).evaluate({"BM": 4})
    msg = str(info.value)
    assert "divides by zero" in msg
    assert repr(text) in msg
    assert "'BM': 4" in msg  # names the values it was evaluated with


@pytest.mark.parametrize(
    ("text", "power"), [("2 ** 1000", "1000"), ("2 ** 10 ** 10", "10000000000"), ("2 ** -65", "-65")]
)
def test_huge_powers_are_refused(text, power):
    with pytest.raises(ConstraintError) as info:
        Expression(text).evaluate({})
    msg = str(info.value)
    assert f"power {power}" in msg
    assert "limit of 64" in msg


def test_power_at_the_limit_is_allowed():
    assert Expression("BM ** 64").evaluate({"BM": 2}) == 2**64
    assert Expression("BM ** -64").evaluate({"BM": 2}) == 2.0**-64


@pytest.mark.parametrize(
    "text",
    ["BM + 'a' > 1", "BM < 'a'", "log2(0)", "log2(-1)", "max()", "gcd(1.5, 2)", "1 in 2", "ceil('x')"],
)
def test_type_and_domain_errors_become_constraint_errors(text):
    with pytest.raises(ConstraintError) as info:
        Expression(text).evaluate({"BM": 4})
    msg = str(info.value)
    assert "cannot be evaluated" in msg or "only numbers are allowed" in msg
    assert repr(text) in msg


# --- the module never hands text to eval/exec ------------------------------------------------------


def test_expr_module_never_calls_eval_exec_or_compile():
    source = (ROOT / "autotune" / "core" / "expr.py").read_text()
    tree = ast.parse(source)
    forbidden = {"eval", "exec", "compile", "__import__"}
    offenders = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in forbidden:
                offenders.append(f"line {node.lineno}: {name}(")
        if isinstance(node, ast.Name) and node.id in forbidden:  # e.g. aliased: run = eval
            offenders.append(f"line {node.lineno}: {node.id}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if "builtins" in modules:
                offenders.append(f"line {node.lineno}: imports builtins")
    assert offenders == []
    # Sanity: the walk does see calls in this module (so an empty result is meaningful).
    assert any(isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "parse" for n in ast.walk(tree))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("BM > -'a'", "only numbers"),
        ("1e300 ** 2 > 1", "cannot be evaluated"),
        ("ceil(1e999) > 1", "cannot be evaluated"),
        ("len((1,) * 10**64) > 1", "calls something other"),
        ("(1,) * 10**64 == 1", "only numbers"),
        ("'a' * 10**10 == 'a'", "only numbers"),
        ("(((((2**64)**64)**64)**64)**64) > 1", "above 2**256"),
        ("2 ** 60 * 2 ** 60 * 2 ** 60 * 2 ** 60 * 2 ** 60 > 1", "above 2**256"),
    ],
)
def test_expressions_that_would_explode_or_crash_are_refused(text, message):
    # Regressions: each of these once escaped as a raw exception or ran for seconds.
    with pytest.raises(ConstraintError, match=re.escape(message)):
        Expression(text).evaluate({"BM": 4})


def test_remembered_results_match_fresh_evaluation_and_errors_still_raise():
    text = "X % 3 == 1 and 10 // Y >= 2 or min(X, Y) == 4"
    e = Expression(text)
    for _ in range(2):  # the second pass is answered from the memo
        for x in range(1, 9):
            for y in range(1, 9):
                assert e.evaluate({"X": x, "Y": y}) == Expression(text).evaluate({"X": x, "Y": y}), (x, y)
    smaller = Expression("min(X, 2)")
    assert smaller.evaluate({"X": 1}) == 1
    assert smaller.evaluate({"X": True}) is True  # True == 1, yet not answered with the remembered 1
    for _ in range(2):  # an error is never remembered as a value
        with pytest.raises(ConstraintError, match="divides by zero"):
            e.evaluate({"X": 1, "Y": 0})
    with pytest.raises(ConstraintError, match="not a parameter"):
        e.evaluate({"X": 1})


def test_a_parameter_named_like_a_function_is_part_of_the_memo_key():
    e = Expression("max > 2 and max(max, 1) >= 1")
    assert e.names == frozenset({"max"})
    assert e.evaluate({"max": 4}) is True
    assert e.evaluate({"max": 1}) is False  # not the remembered True


# --- deep nesting: a value or one clear error, never RecursionError ---------------------------------------


@pytest.mark.parametrize("signs", [1, 2, 989, 990, 997])
def test_hundreds_of_unary_minus_signs_give_a_value(signs):
    text = "-" * signs + "BM"
    assert len(text) <= 1000
    assert Expression(text).evaluate({"BM": 3}) == (-3 if signs % 2 else 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not " * 249 + "BM", False),
        ("+".join(["BM"] * 330), 990),
        ("abs(" * 160 + "-BM" + ")" * 160, 3),
        ("(" * 199 + "BM" + ")" * 199, 3),
        ("BM if BM > 5 else " * 50 + "1", 1),
        ("BM - (" * 141 + "1" + ")" * 141, 2),
    ],
)
def test_deeply_nested_expressions_evaluate_without_recursion(text, expected):
    assert len(text) <= 1000
    assert Expression(text).evaluate({"BM": 3}) == expected


def test_parentheses_deeper_than_python_parses_are_one_clear_error():
    text = "(" * 400 + "BM" + ")" * 400
    with pytest.raises(ConstraintError, match="cannot parse") as info:
        Expression(text)
    assert len(str(info.value)) < 200  # the 800-character text is cut, not repeated


def _random_tree(rng, depth: int) -> tuple[str, int]:
    """(text, value) of a random integer expression nested ``depth`` deep, its value computed here."""
    text, value = "X", 5
    for _ in range(depth):
        k = rng.randrange(5)
        if k == 0:
            text, value = f"-{text}", -value
        elif k == 1:
            text, value = f"({text} + 2)", value + 2
        elif k == 2:
            text, value = f"max({text}, 0)", max(value, 0)
        elif k == 3:
            text, value = f"(7 - {text})", 7 - value
        else:
            text, value = f"({text} if X > 1 else 0)", value
    return text, value


@pytest.mark.parametrize("seed", range(20))
def test_random_deep_expressions_match_their_computed_value(seed):
    import random

    rng = random.Random(seed)
    text, value = _random_tree(rng, rng.randrange(20, 90))
    assert Expression(text).evaluate({"X": 5}) == value


def test_an_evaluation_error_carries_its_expression():
    from autotune.core.expr import EvaluationError

    with pytest.raises(EvaluationError) as info:
        Expression("BM // (WM - WM) > 0").evaluate({"BM": 4, "WM": 2})
    assert info.value.text == "BM // (WM - WM) > 0"
    assert isinstance(info.value, ConstraintError)


def test_strings_an_expression_builds_are_bounded():
    long = "x" * 3000
    with pytest.raises(ConstraintError, match="builds a string of more than"):
        Expression("S + S == ''").evaluate({"S": long})
    assert Expression("S + 'y' == T").evaluate({"S": "x", "T": "xy"}) is True


def test_messages_show_long_values_cut():
    with pytest.raises(ConstraintError) as info:
        Expression("S * 2 > 1").evaluate({"S": "v" * 100_000})
    assert "only numbers are allowed" in str(info.value)
    assert len(str(info.value)) < 300
