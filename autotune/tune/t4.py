"""Records of measured search spaces: the T4 format of the autotuning community, and Kernel Tuner cache files.

A :class:`Record` is every configuration of a space that was measured, each an :class:`Entry` with its validity
(T4's ``invalidity``: correct, compile, runtime, constraints), correctness, runtimes and the time it cost
(compilation, benchmark, validation, framework; milliseconds, as Kernel Tuner writes them). Configurations absent
from a record count as infeasible.

- :func:`load_record` reads a T4 results file or a Kernel Tuner cache file (JSON, or ``.json.gz``).
- :func:`write_t4` writes T4 (``{"schema_version", "results": [...]}``) plus our ``metadata``: the space's values
  (``tune_params``) and the provenance (GPU, versions, date, template hash, study).
- :func:`study_record` exports any study of a storage, e.g. a ``--sampler brute`` run's complete space.
"""

from __future__ import annotations

import datetime as dt
import enum
import gzip
import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..core.errors import AutotuneError
from ..core.space import Config, Param, Space

SCHEMA_VERSION = "1.0.0"  # the T4 results schema Kernel Tuner writes
KT_FAILURES = {"CompilationFailedConfig": "compile", "RuntimeFailedConfig": "runtime", "InvalidConfig": "constraints"}
TIMES = ("compilation", "benchmark", "validation", "framework")  # T4 "times" keys besides runtimes, in ms
# What an autotune trial's status becomes in T4: (invalidity, correctness)
_FROM_STATUS = {
    "complete": ("correct", True), "pruned": ("correct", True), "verify-failed": ("correct", False),
    "invalid": ("constraints", True), "compile-failed": ("compile", True), "launch-failed": ("runtime", True),
    "timed-out": ("runtime", True),
}  # fmt: skip


class Validity(enum.StrEnum):
    """T4's ``invalidity``: whether the configuration could be compiled and run at all."""

    CORRECT = "correct"
    COMPILE = "compile"
    RUNTIME = "runtime"
    CONSTRAINTS = "constraints"


@dataclass(frozen=True)
class Entry:
    """One measured configuration. ``time_ms`` is the objective (None where it could not run); ``status`` is
    autotune's own trial state where the record came from a study ("pruned", "timed-out", ...), else empty."""

    config: Config
    validity: Validity
    correct: bool
    time_ms: float | None
    runtimes_ms: tuple[float, ...] = ()
    compile_ms: float = 0.0
    benchmark_ms: float = 0.0
    validation_ms: float = 0.0
    framework_ms: float = 0.0
    timestamp: str = ""
    status: str = ""
    extra: tuple[tuple[str, Any], ...] = ()  # other measurements (GFLOP/s, registers, ...)

    @property
    def ok(self) -> bool:
        """Ran, verified and timed: a candidate for the optimum."""
        return self.validity is Validity.CORRECT and self.correct and self.time_ms is not None


@dataclass(frozen=True)
class Record:
    """A measured space: its parameters (values in order), its entries and where they come from."""

    name: str
    params: tuple[Param, ...]
    entries: tuple[Entry, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def space(self) -> Space:
        return Space(self.params)

    @cached_property
    def by_key(self) -> dict[str, Entry]:
        return {e.config.key: e for e in self.entries}

    @cached_property
    def optimum_ms(self) -> float:
        """The fastest correct time of the record."""
        times = [e.time_ms for e in self.entries if e.ok and e.status != "pruned"]
        if not times:
            raise AutotuneError(f"record {self.name!r} has no correct configuration, so it has no optimum")
        return min(times)  # type: ignore[type-var]


def load_record(path: str | Path) -> Record:
    """A T4 results file or a Kernel Tuner cache file (``.json`` or ``.json.gz``) as a :class:`Record`."""
    p = Path(path)
    try:
        raw = gzip.open(p, "rt").read() if p.name.endswith(".gz") else p.read_text()
        data = json.loads(raw)
    except FileNotFoundError:
        raise AutotuneError(f"{p}: record file not found") from None
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AutotuneError(f"{p}: not a readable JSON record ({exc})") from None
    name = p.name.removesuffix(".gz").removesuffix(".json")
    try:
        if isinstance(data, dict) and isinstance(data.get("results"), list):
            return from_t4(data, name)
        if isinstance(data, dict) and isinstance(data.get("cache"), dict):
            return from_kt_cache(data, name)
    except (KeyError, TypeError, ValueError) as exc:
        raise AutotuneError(f"{p}: malformed record entry ({type(exc).__name__}: {exc})") from None
    raise AutotuneError(f"{p}: neither a T4 results file ('results') nor a Kernel Tuner cache file ('cache')")


def from_kt_cache(data: Mapping[str, Any], name: str) -> Record:
    """A Kernel Tuner cache: its tunable parameters become the space; failed configurations stay failed."""
    objective = data.get("objective", "time")
    if objective != "time":
        raise AutotuneError(f"{name}: objective {objective!r}; only time records can be replayed")
    keys = list(data["tune_params_keys"])
    params = tuple(Param(k, tuple(data["tune_params"][k])) for k in keys)
    timing = ("compile_time", "benchmark_time", "verification_time", "framework_time", "strategy_time")
    entries = []
    for e in data["cache"].values():
        t = e["time"]
        if isinstance(t, str):
            if t not in KT_FAILURES:
                raise ValueError(f"unknown failure {t!r}")
            validity, time_ms = Validity(KT_FAILURES[t]), None
        else:
            validity, time_ms = Validity.CORRECT, float(t)
        extra = tuple((k, v) for k, v in e.items() if k not in keys and k not in ("time", "times", "timestamp")
                      and k not in timing and isinstance(v, (int, float)))  # fmt: skip
        entries.append(Entry(
            Config(tuple((k, e[k]) for k in keys)), validity, True, time_ms, tuple(map(float, e.get("times", ()))),
            float(e.get("compile_time", 0.0)), float(e.get("benchmark_time", 0.0)),
            float(e.get("verification_time", 0.0)), float(e.get("framework_time", 0.0)), str(e.get("timestamp", "")),
            extra=extra,
        ))  # fmt: skip
    provenance = {"source": "Kernel Tuner cache file", **{k: data[k] for k in ("device_name", "kernel_name",
                  "problem_size") if k in data}}  # fmt: skip
    return Record(name, params, tuple(entries), provenance)


def from_t4(data: Mapping[str, Any], name: str) -> Record:
    """A T4 results file; the space is ``metadata.tune_params`` where we wrote it, else the values seen."""
    meta = data.get("metadata") or {}
    entries = []
    for r in data["results"]:
        times = r.get("times", {})
        measured = {m["name"]: m["value"] for m in r.get("measurements", [])}
        objective = (r.get("objectives") or ["time"])[0]
        validity = Validity(r["invalidity"])
        value = measured.get(objective)
        time_ms = float(value) if validity is Validity.CORRECT and isinstance(value, (int, float)) else None
        extra = tuple((k, v) for k, v in measured.items() if k not in (objective, "status"))
        entries.append(Entry(
            Config(tuple(r["configuration"].items())), validity, bool(r.get("correctness", 1)), time_ms,
            tuple(map(float, times.get("runtimes", ()))), *(float(times.get(k, 0.0)) for k in TIMES),
            str(r.get("timestamp", "")), str(measured.get("status", "")), extra,
        ))  # fmt: skip
    if "tune_params" in meta:
        params = tuple(Param(k, tuple(v)) for k, v in meta["tune_params"].items())
    else:
        names = list(entries[0].config.as_dict()) if entries else []
        params = tuple(Param(n, tuple(sorted({e.config[n] for e in entries}))) for n in names)
    return Record(meta.get("name", name), params, tuple(entries), dict(meta.get("provenance", {})))


def to_t4(record: Record) -> dict[str, Any]:
    """The record as a T4 results document, with ``metadata`` (space, provenance) beside ``results``."""
    results = []
    for e in record.entries:
        measurements = [{"name": "time", "value": e.time_ms, "unit": "ms"}] if e.time_ms is not None else []
        measurements += [{"name": k, "value": v, "unit": "ms" if k.endswith("_ms") else ""} for k, v in e.extra]
        if e.status:
            measurements.append({"name": "status", "value": e.status, "unit": ""})
        times = dict(zip(TIMES, (e.compile_ms, e.benchmark_ms, e.validation_ms, e.framework_ms), strict=True))
        results.append({
            "timestamp": e.timestamp, "configuration": e.config.as_dict(),
            "times": {**times, "search_algorithm": 0.0, "runtimes": list(e.runtimes_ms)},
            "invalidity": e.validity.value, "correctness": int(e.correct), "measurements": measurements,
            "objectives": ["time"],
        })  # fmt: skip
    meta = {"name": record.name, "tune_params": {p.name: list(p.values) for p in record.params},
            "provenance": dict(record.provenance)}  # fmt: skip
    return {"schema_version": SCHEMA_VERSION, "results": results, "metadata": meta}


def write_t4(record: Record, path: str | Path) -> Path:
    """Write the record as T4 JSON (gzip-compressed when the name ends in .gz)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(to_t4(record), separators=(",", ":"))
    tmp = p.with_name(p.name + ".tmp")
    if p.name.endswith(".gz"):
        with gzip.open(tmp, "wt", compresslevel=9) as f:
            f.write(text)
    else:
        tmp.write_text(text)
    tmp.replace(p)
    return p


def subset(record: Record, keep: int, seed: int = 0) -> Record:
    """A seeded sample of ``keep`` entries for tests and examples: always the optimum, some failed entries where the
    record has them, the rest drawn at random; each parameter keeps the values still present."""
    import random

    rng = random.Random(seed)
    best = min((e for e in record.entries if e.ok), key=lambda e: e.time_ms)  # type: ignore[arg-type, return-value]
    failed = [e for e in record.entries if not e.ok][: max(1, keep // 20)]
    rest = [e for e in record.entries if e is not best and e not in failed]
    chosen = [best, *failed, *rng.sample(rest, max(0, min(len(rest), keep - 1 - len(failed))))]
    params = tuple(Param(p.name, tuple(v for v in p.values if any(e.config[p.name] == v for e in chosen)))
                   for p in record.params)  # fmt: skip
    provenance = {**record.provenance, "subset_of": record.name, "subset_seed": seed}
    return Record(f"{record.name}.subset{keep}", params, tuple(chosen), provenance)


def study_record(storage: Any, study: str, provenance: Mapping[str, Any] | None = None) -> Record:
    """Every evaluated trial of ``study`` in ``storage`` (an Optuna storage object) as a record; duplicates and
    trials never evaluated are left out. The space is the study's parameter values."""
    import optuna

    try:
        s = optuna.load_study(study_name=study, storage=storage)
    except KeyError:
        names = ", ".join(optuna.get_all_study_names(storage)) or "none"
        raise AutotuneError(f"no study {study!r} in the storage; its studies: {names}") from None
    values: dict[str, tuple[Any, ...]] = {}
    entries, seen, hashes = [], set(), set()
    for t in s.get_trials(deepcopy=False):
        status = t.user_attrs.get("status")
        if status not in _FROM_STATUS or "duplicate_of" in t.user_attrs or not t.state.is_finished():
            continue
        for name, d in t.distributions.items():
            values.setdefault(name, tuple(getattr(d, "choices", ())))
        a = t.user_attrs.get("result", {})
        config = Config.of({k: t.params[k] for k in t.params})
        if config.key in seen:
            continue
        seen.add(config.key)
        hashes.add(a.get("template_hash", ""))
        entries.append(_trial_entry(t, config, status, a))
    params = tuple(Param(n, v) for n, v in values.items())
    meta = {
        "source": "autotune study",
        "study": study,
        "template_hash": sorted(h for h in hashes if h),
        "exported": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **_versions(),
        **(provenance or {}),
    }
    return Record(study, params, tuple(entries), meta)


def _trial_entry(t: Any, config: Config, status: str, a: Mapping[str, Any]) -> Entry:
    validity, correct = _FROM_STATUS[status]
    median = a.get("median_ms")
    time_ms = float(median) if validity == "correct" and correct and median is not None else None
    repeats = int(a.get("repeats") or 0)
    extra = tuple((k, a[k]) for k in ("min_ms", "max_ms", "iqr_ms", "repeats", "tflops", "registers", "spills",
                                       "error", "source_hash", "reason") if a.get(k) is not None)  # fmt: skip
    stamp = t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else ""
    # The study keeps a median, not every launch: the benchmark time is the launches' own time.
    bench = (median or 0.0) * repeats
    return Entry(config, Validity(validity), correct, time_ms, (), 1e3 * float(a.get("compile_s") or 0.0), bench,
                 timestamp=stamp, status=status, extra=extra)  # fmt: skip


def _versions() -> dict[str, Any]:
    """Versions of what measured and searched; the GPU where one is visible (an export on the tuning host)."""
    import importlib.metadata as md

    from ..core.version import __version__

    out: dict[str, Any] = {"autotune": __version__}
    for pkg in ("optuna", "cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    from ..core.device import current_gpu

    try:
        gpu = current_gpu()
        out["gpu"] = {"name": gpu.name, "arch": gpu.arch, "key": gpu.key, "driver": gpu.driver, "runtime": gpu.runtime}
    except AutotuneError as exc:
        out["gpu"] = f"not recorded: {exc}"
        return out
    from ..build.compiler import nvrtc_version

    out["nvrtc"] = nvrtc_version()  # a GPU was usable, so CuPy and NVRTC load
    return out


def timing_of(e: Entry) -> tuple[float, float, float, float, int]:
    """(median, min, max, interquartile range, repeats) of an entry's runtimes, or of its recorded summary."""
    extra = dict(e.extra)
    if len(e.runtimes_ms) >= 2:
        rs = sorted(e.runtimes_ms)
        q = statistics.quantiles(rs, n=4)
        return e.time_ms or statistics.median(rs), rs[0], rs[-1], q[2] - q[0], len(rs)
    t = e.time_ms or 0.0
    return t, extra.get("min_ms", t), extra.get("max_ms", t), extra.get("iqr_ms", 0.0), int(extra.get("repeats", 1))


def export_command(source: str, study: str | None, out: str) -> int:
    """``autotune export-t4``: one study of a journal file or storage URL to a T4 record (``.json`` or ``.json.gz``)."""
    import optuna

    from .search import open_storage

    if "://" not in source and not Path(source).is_file():
        raise AutotuneError(f"{source}: no such journal file (give a study journal or a storage URL)")
    storage = open_storage(source)
    names = optuna.get_all_study_names(storage)
    if study is None:
        if len(names) != 1:
            listed = ", ".join(names) or "none"
            raise AutotuneError(f"{source} holds {len(names)} studies; name one with --study (its studies: {listed})")
        study = names[0]
    record = study_record(storage, study, {"storage": source})
    if not record.entries:
        raise AutotuneError(f"study {study!r} has no evaluated trial to export")
    path = write_t4(record, out)
    ok = sum(e.ok for e in record.entries)
    print(f"wrote {path}: {len(record.entries)} configurations ({ok} correct) of {study}")
    return 0


def to_kt_cache(record: Record, device_name: str = "", kernel_name: str = "") -> dict[str, Any]:
    """The record as a Kernel Tuner cache file (what its simulation mode replays): failures as its error strings."""
    keys = [p.name for p in record.params]
    failures = {v: k for k, v in KT_FAILURES.items()}
    cache = {}
    for e in record.entries:
        values = e.config.as_dict()
        if not e.ok:
            time: Any = failures.get(e.validity.value, "RuntimeFailedConfig")
        else:
            time = e.time_ms
        cache[",".join(str(values[k]) for k in keys)] = {
            **values, "time": time, "times": list(e.runtimes_ms), "compile_time": e.compile_ms,
            "verification_time": e.validation_ms, "benchmark_time": e.benchmark_ms, "framework_time": e.framework_ms,
            "strategy_time": 0, "timestamp": e.timestamp,
        }  # fmt: skip
    prov = record.provenance
    return {
        "device_name": device_name or str(prov.get("device_name", "recorded")),
        "kernel_name": kernel_name or str(prov.get("kernel_name", record.name)),
        "problem_size": prov.get("problem_size", [1]), "tune_params_keys": keys,
        "tune_params": {p.name: list(p.values) for p in record.params}, "objective": "time", "cache": cache,
    }  # fmt: skip
