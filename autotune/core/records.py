"""Typed records of tuned/ files: the entry key and ``TunedEntry``, with the file's schema version.

A tuned file is ``{"schema": SCHEMA, "kernel": ..., "gpu": {...}, "entries": {key: entry}}``. The key is
``dtype/layout/label`` (``EntryKey``, built and parsed here only); the entry is one verified winner with its
provenance (``TunedEntry``). ``TunedEntry.from_json`` checks an entry field by field and raises ``RecordError``
with one sentence naming the field; ``to_json`` gives back the dict that callers read and files store.

Schema history:

- 1: entries were untyped dicts; entries written before energy tuning lack ``objective`` and the energy fields,
  and entries written before extra memory was recorded lack ``extra_bytes``.
- 2: every entry is a ``TunedEntry`` record with the full field set (absent provenance is null; ``objective``
  defaults to ``["time"]``, the only objective before it was recorded). Migration from 1 fills these fields and
  changes nothing else.

>>> e = TunedEntry.from_json({"template": "simt", "params": {"BM": 64}, "verified": True, "median_ms": 0.5})
>>> e.to_json()["objective"], str(EntryKey.parse("float32/NN/64x64x64"))
(['time'], 'float32/NN/64x64x64')
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

SCHEMA = 2
MIGRATES = (1,)  # older schemas this version reads, and rewrites as SCHEMA on the next merge


class RecordError(ValueError):
    """A tuned entry or its key is malformed; the message is one sentence naming the field."""


@dataclass(frozen=True, order=True)
class EntryKey:
    """Where an entry sits in a tuned file: its dtype, operand layout and problem label (the shape)."""

    dtype: str
    layout: str
    label: str

    def __str__(self) -> str:
        return f"{self.dtype}/{self.layout}/{self.label}"

    @classmethod
    def parse(cls, text: Any) -> EntryKey:
        """``"float32/NN/64x64x64"`` -> ``EntryKey("float32", "NN", "64x64x64")``; RecordError if malformed."""
        parts = text.split("/") if isinstance(text, str) else []
        if len(parts) != 3 or not all(p and p == p.strip() for p in parts):
            raise RecordError(f"key {_short(text)} is not dtype/layout/shape (e.g. float32/NN/64x64x64)")
        return cls(*parts)


_SCALAR = (bool, int, float, str)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, str) else repr(value[:limit])
    return text if len(text) <= limit + 2 else text[:limit] + "...'"


def _number(name: str, v: Any, *, nullable: bool = True, positive: bool = False) -> float | int | None:
    """A finite number >= 0 (> 0 when ``positive``): times, rates, errors and ratios are never negative."""
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        kind = "a positive number" if positive else "a finite number >= 0" + (" or null" if nullable else "")
        raise RecordError(f"{name} must be {kind}, got {_short(v)}")
    return v


def _integer(name: str, v: Any) -> int | None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
        raise RecordError(f"{name} must be an integer >= 0 or null, got {_short(v)}")
    return v


def _text(name: str, v: Any, *, nullable: bool = True) -> str | None:
    """A string; a required one (``nullable`` False) must not be empty."""
    if v is None and nullable:
        return None
    if not isinstance(v, str) or (not nullable and not v):
        raise RecordError(f"{name} must be {'a string or null' if nullable else 'a non-empty string'}, got {_short(v)}")
    return v


def _params(name: str, v: Any) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise RecordError(f"{name} must be an object of parameter values, got {_short(v)}")
    for k, x in v.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise RecordError(f"{name} has a parameter name {_short(k)} that is not an identifier")
        if not isinstance(x, _SCALAR) or (isinstance(x, float) and not math.isfinite(x)):
            raise RecordError(f"{name}.{k} must be a number, a boolean or a string, got {_short(x)}")
    return MappingProxyType(dict(v))


def _objective(name: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise RecordError(f"{name} must be a non-empty list of objective names, got {_short(v)}")
    return tuple(v)


def _versions(name: str, v: Any) -> Mapping[str, str | None]:
    if not isinstance(v, Mapping):
        raise RecordError(f"{name} must be an object of version strings, got {_short(v)}")
    for k, x in v.items():
        if not isinstance(k, str) or not (x is None or isinstance(x, str)):
            raise RecordError(f"{name}.{k} must be a version string or null, got {_short(x)}")
    return MappingProxyType(dict(v))


def _front(name: str, v: Any) -> tuple[Mapping[str, Any], ...] | None:
    """A time-energy front: verified points, each with its parameters, kernel name and median time."""
    if v is None:
        return None
    if not isinstance(v, list):
        raise RecordError(f"{name} must be a list of points, got {_short(v)}")
    for i, p in enumerate(v):
        where = f"{name}[{i}]"
        if not isinstance(p, Mapping):
            raise RecordError(f"{where} must be an object, got {_short(p)}")
        _params(f"{where}.params", p.get("params"))
        _text(f"{where}.kernel_name", p.get("kernel_name"), nullable=False)
        _number(f"{where}.median_ms", p.get("median_ms"), nullable=False, positive=True)
        _number(f"{where}.energy_j", p.get("energy_j"))
        if p.get("verified") is not True:
            raise RecordError(f"{where}.verified must be true (only verified points are stored)")
    return tuple(MappingProxyType(copy.deepcopy(dict(p))) for p in v)


@dataclass(frozen=True, kw_only=True)
class TunedEntry:
    """One stored winner: the configuration served for a (GPU, dtype, layout, shape), and its provenance.

    Required: ``template``, ``params``, ``verified`` (true) and ``median_ms``. The rest is provenance and may be
    null. Fields this version does not know are kept in ``extra`` and written back unchanged.
    """

    template: str
    params: Mapping[str, Any]
    kernel_name: str | None = None
    template_hash: str | None = None
    source_hash: str | None = None
    verified: bool = True
    error: float | None = None
    tolerance: float | None = None
    median_ms: float
    min_ms: float | None = None
    max_ms: float | None = None
    iqr_ms: float | None = None
    repeats: int | None = None
    tflops: float | None = None
    gbps: float | None = None
    registers: int | None = None
    extra_bytes: int | None = None
    energy_j: float | None = None
    gflops_per_j: float | None = None
    energy_method: str | None = None
    objective: tuple[str, ...] = ("time",)
    vendor: str | None = None
    vendor_median_ms: float | None = None
    vendor_ratio: float | None = None
    versions: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))
    date: str | None = None
    trials: int | None = None
    spec: str | None = None
    study: str | None = None
    pareto: tuple[Mapping[str, Any], ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_json(cls, doc: Any) -> TunedEntry:
        """Check a stored entry field by field; RecordError names the first field that is wrong."""
        if not isinstance(doc, Mapping):
            raise RecordError(f"the entry must be an object, got {_short(doc)}")
        if "template" not in doc:
            raise RecordError("template is missing")
        if doc.get("verified") is not True:
            got = _short(doc.get("verified"))
            raise RecordError(f"verified must be true (only verified results are stored), got {got}")
        values: dict[str, Any] = {"verified": True}
        for name, check in _CHECKS.items():
            if name in doc:
                values[name] = check(name, doc[name])
            elif name in _REQUIRED:
                raise RecordError(f"{name} is missing")
        known = {f.name for f in fields(cls)} - {"extra"}
        values["extra"] = MappingProxyType({k: copy.deepcopy(v) for k, v in doc.items() if k not in known})
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The entry as stored: plain dicts and lists, fields in a fixed order, ``pareto`` only when present."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "extra" or (f.name == "pareto" and v is None):
                continue
            if isinstance(v, Mapping):
                v = dict(v)
            elif isinstance(v, tuple):
                v = [copy.deepcopy(dict(p)) for p in v] if f.name == "pareto" else list(v)
            out[f.name] = v
        return {**out, **{k: copy.deepcopy(v) for k, v in self.extra.items() if k not in out}}


def _float(name: str, v: Any) -> Any:
    return _number(name, v)


_FLOATS = ("error", "tolerance", "min_ms", "max_ms", "iqr_ms", "tflops", "gbps", "energy_j", "gflops_per_j",
           "vendor_median_ms", "vendor_ratio")  # fmt: skip
_CHECKS: dict[str, Any] = {
    "template": lambda n, v: _text(n, v, nullable=False),
    "params": _params,
    "median_ms": lambda n, v: _number(n, v, nullable=False, positive=True),
    "kernel_name": _text,
    "template_hash": _text,
    "source_hash": _text,
    **dict.fromkeys(_FLOATS, _float),
    **dict.fromkeys(("repeats", "registers", "extra_bytes", "trials"), _integer),
    **dict.fromkeys(("energy_method", "vendor", "date", "spec", "study"), _text),
    "objective": _objective,
    "versions": _versions,
    "pareto": _front,
}
_REQUIRED = ("template", "params", "median_ms")
