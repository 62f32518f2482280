"""Safe evaluation of constraint expressions such as ``BM % WM == 0 and BM * BK <= 4096``.

Expressions are parsed with :mod:`ast` and only a whitelist of nodes is interpreted: numbers,
strings, booleans, names of parameters, arithmetic, comparisons, boolean logic, conditional
expressions and calls of a few pure functions. Nothing is ever passed to ``eval``; attribute
access, subscripts, lambdas, comprehensions and calls of anything else are rejected when the
expression is compiled, before any candidate is looked at.

>>> Expression("BM % WM == 0 and min(BM, BN) >= 32").evaluate({"BM": 128, "WM": 64, "BN": 64})
True
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConstraintError, brief

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _is_pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and x & (x - 1) == 0


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "ceil": math.ceil,
    "floor": math.floor,
    "log2": math.log2,
    "gcd": math.gcd,
    "is_pow2": _is_pow2,
}

MAX_LENGTH = 1000  # characters in one expression: enough for any constraint, bounded parse work
_MAX_POWER = 64  # keeps ``2 ** 10 ** 10`` from stalling the process
_MEMO_SIZE = 1 << 16  # remembered results per expression
_MAX_BITS = 256  # integers larger than this are no tile size; refusing them keeps every step cheap
_MAX_STRING = 4096  # characters in a string an expression builds (parameter values may be long strings)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float))


def _check_power(base: Any, exponent: Any, text: str) -> None:
    if abs(exponent) > _MAX_POWER:
        raise ConstraintError(f"{text!r} raises to the power {exponent}, above the limit of {_MAX_POWER}")
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and base.bit_length() * exponent > _MAX_BITS
    ):
        raise ConstraintError(f"{text!r} computes a number above 2**{_MAX_BITS}")


def _bounded(v: Any, text: str) -> Any:
    if isinstance(v, int) and v.bit_length() > _MAX_BITS:
        raise ConstraintError(f"{text!r} computes a number above 2**{_MAX_BITS}")
    if isinstance(v, str) and len(v) > _MAX_STRING:
        raise ConstraintError(f"{text!r} builds a string of more than {_MAX_STRING} characters")
    return v


class EvaluationError(ConstraintError):
    """An expression that compiled but cannot be evaluated for some values (a division by zero, a string
    compared with a number); ``text`` is the expression, so a caller can name the key it came from."""

    def __init__(self, text: str, message: str) -> None:
        super().__init__(message)
        self.text = text


@dataclass(frozen=True)
class Expression:
    """A compiled, whitelisted expression; ``names`` are the parameters it reads."""

    text: str
    names: frozenset[str] = field(init=False)
    _tree: ast.Expression = field(init=False, repr=False, compare=False)
    _order: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _memo: dict[tuple[Any, ...], Any] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.text) > MAX_LENGTH:
            raise ConstraintError(f"{self.text[:40]!r}... is {len(self.text)} characters, over {MAX_LENGTH}")
        try:
            tree = ast.parse(self.text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ConstraintError(f"cannot parse {brief(self.text, 100)}: {exc.msg}") from None
        except ValueError as exc:  # a null character
            raise ConstraintError(f"cannot parse {brief(self.text, 100)}: {exc}") from None
        except (RecursionError, MemoryError):
            raise ConstraintError(f"cannot parse {brief(self.text, 100)}: nested too deeply") from None
        names: set[str] = set()
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            _check_node(node, self.text)
            if isinstance(node, ast.Name) and id(node) not in called:  # a parameter, even one named like a function
                names.add(node.id)
        object.__setattr__(self, "_tree", tree)
        object.__setattr__(self, "names", frozenset(names))
        object.__setattr__(self, "_order", tuple(sorted(names)))

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        """Value of the expression with parameter names bound from ``values``.

        Remembered per combination of the values it reads: enumerating a space evaluates a constraint over
        a few parameters for the same few combinations thousands of times.
        """
        try:
            key = tuple((type(values[n]), values[n]) for n in self._order)
        except (KeyError, TypeError):  # a missing name raises its own error below; unhashable: no memo
            return self._evaluate(values)
        if key in self._memo:
            return self._memo[key]
        result = self._evaluate(values)
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[key] = result
        return result

    def _evaluate(self, values: Mapping[str, Any]) -> Any:
        try:
            return _eval(self._tree.body, values, self.text)
        except EvaluationError:
            raise
        except ConstraintError as exc:
            raise EvaluationError(self.text, str(exc)) from None


_ALLOWED = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Tuple,
    ast.List,
    *_BINARY,
    *_UNARY,
    *_COMPARE,
)


def _check_node(node: ast.AST, text: str) -> None:
    if not isinstance(node, _ALLOWED):
        raise ConstraintError(f"{text!r} uses {type(node).__name__}, which constraints may not use")
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool)):
        raise ConstraintError(f"{text!r} contains the constant {node.value!r}, which is not a number or string")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise ConstraintError(
                f"{text!r} calls something other than the allowed functions ({', '.join(sorted(FUNCTIONS))})"
            )
        if node.keywords:
            raise ConstraintError(f"{text!r} passes keyword arguments, which constraints may not use")
    if isinstance(node, ast.Name) and node.id.startswith("__"):
        raise ConstraintError(f"{text!r} names {node.id!r}; dunder names are not allowed")


def _eval(root: ast.AST, values: Mapping[str, Any], text: str) -> Any:
    """Value of ``root``, computed without recursion: each node is a generator that yields the children it
    needs, one at a time, and returns its value; a stack of them is driven here. However deeply an expression
    nests (990 unary minus signs fit in the length limit), evaluating it never raises RecursionError."""
    stack = [_node_steps(root, values, text)]
    value: Any = None
    while stack:
        try:
            child = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            value = done.value
            continue
        if isinstance(child, ast.Constant):  # leaves inline: most of the nodes, and no generator for them
            value = child.value
        elif isinstance(child, ast.Name) and child.id in values:
            value = values[child.id]
        else:
            stack.append(_node_steps(child, values, text))
            value = None
    return value


def _node_steps(node: ast.AST, values: Mapping[str, Any], text: str) -> Generator[ast.AST, Any, Any]:
    """One node's evaluation: yields each child to evaluate (receiving its value) and returns the node's value.
    Short-circuits like Python: ``and``, ``or``, chained comparisons and ``x if c else y`` skip what is not needed."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in values:
            return values[node.id]
        raise ConstraintError(f"{text!r} names {node.id!r}, which is not a parameter")
    if isinstance(node, ast.BinOp):
        left = yield node.left
        right = yield node.right
        return _binary(node.op, left, right, values, text)
    if isinstance(node, ast.UnaryOp):
        operand = yield node.operand
        if not isinstance(node.op, ast.Not) and not _is_number(operand):
            raise ConstraintError(f"{text!r} applies a sign to {brief(operand)}; only numbers are allowed")
        return _UNARY[type(node.op)](operand)
    if isinstance(node, ast.BoolOp):
        want = isinstance(node.op, ast.Or)  # the value that decides: any true for "or", any false for "and"
        for v in node.values:
            if bool((yield v)) is want:
                return want
        return not want
    if isinstance(node, ast.Compare):
        left = yield node.left
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = yield comparator
            try:
                ok = _COMPARE[type(op)](left, right)
            except TypeError as exc:
                raise ConstraintError(f"{text!r} cannot be evaluated: {exc}") from None
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return (yield node.body if (yield node.test) else node.orelse)
    if isinstance(node, ast.Call):
        func = FUNCTIONS[node.func.id]  # type: ignore[union-attr]
        args = []
        for a in node.args:
            args.append((yield a))
        try:
            return _bounded(func(*args), text)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ConstraintError(f"{text!r} cannot be evaluated: {exc}") from None
    if isinstance(node, (ast.Tuple, ast.List)):
        items = []
        for e in node.elts:
            items.append((yield e))
        return tuple(items)
    raise ConstraintError(f"{text!r} uses {type(node).__name__}, which constraints may not use")


def _binary(op: ast.operator, left: Any, right: Any, values: Mapping[str, Any], text: str) -> Any:
    # Arithmetic is on numbers (and string concatenation) only: no repetition that allocates gigabytes.
    joins_strings = isinstance(op, ast.Add) and isinstance(left, str) and isinstance(right, str)
    if not (_is_number(left) and _is_number(right)) and not joins_strings:
        raise ConstraintError(f"{text!r} does arithmetic on {brief(left)} and {brief(right)}; only numbers are allowed")
    if isinstance(op, ast.Pow):
        _check_power(left, right, text)
    try:
        result = _BINARY[type(op)](left, right)
    except ZeroDivisionError:
        raise ConstraintError(f"{text!r} divides by zero for {brief(dict(values), 200)}") from None
    except (OverflowError, ValueError) as exc:
        raise ConstraintError(f"{text!r} cannot be evaluated: {exc}") from None
    return _bounded(result, text)
