"""Serve tuned kernels at run time: look up the best verified configuration, compile once, launch.

The lookup chain, each step logged at debug level:

1. exact: this GPU, dtype, layout and shape in ``tuned/<gpu-key>/<kernel>.json``;
2. nearest: the closest tuned shape on this GPU (the kernels handle any shape, so its config applies);
3. same architecture: the same steps on another GPU of the same ``sm_XX``;
4. default: the family's default configuration, which the GPU test tier verifies on odd shapes.

Entries whose source the installed template no longer renders are skipped: a configuration is served only
with the source it was verified with (the same template file, or the same rendered source hash). Compiled
cubins are cached on disk, keyed by the rendered source, the compile options, the architecture and the NVRTC
version, and in process.

>>> import cupy as cp, autotune                                    # doctest: +SKIP
>>> c = autotune.gemm(cp.ones((300, 500), cp.float32), cp.ones((500, 70), cp.float32))  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..build.compiler import CompileResult, compile_source, nvrtc_version
from ..build.templates import fits_installed, installed_renders, render, template_hash
from ..core.errors import AutotuneError
from ..kernels import FAMILIES
from ..results.store import read_or_empty, tuned_file
from . import dispatch
from .launcher import Launcher, StagedLauncher

if TYPE_CHECKING:
    from ..measure.vendor import VendorLauncher

log = logging.getLogger(__name__)

ENV_TUNED_DIR = "AUTOTUNE_TUNED_DIR"
ENV_CACHE_DIR = "AUTOTUNE_CACHE_DIR"
ENV_ONLINE = "AUTOTUNE_ONLINE"  # "0": no online choice; untuned problems go to the vendor (autotune.serve.dispatch)
ENV_VENDOR = "AUTOTUNE_VENDOR"  # "0": the lookup chain's kernel, never the vendor (autotune.serve.dispatch)


def _env() -> tuple[str | None, str | None, str | None]:
    """The environment a memoized call signature depends on: tuned dir, online choice, vendor substitution."""
    env = os.environ
    return env.get(ENV_TUNED_DIR), env.get(ENV_ONLINE), env.get(ENV_VENDOR)


def default_tuned_dir() -> Path:
    """``$AUTOTUNE_TUNED_DIR``, else ./tuned (where ``autotune run`` writes by default), else the package's."""
    if os.environ.get(ENV_TUNED_DIR):
        return Path(os.environ[ENV_TUNED_DIR])
    if Path("tuned").is_dir():
        return Path("tuned")
    here = Path(__file__).resolve().parents[2] / "tuned"
    if here.is_dir():
        return here
    from importlib import resources

    return Path(str(resources.files("autotune") / "_tuned"))


def cache_dir() -> Path:
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune"


# --- choosing a configuration (pure: no GPU) ---------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """What the lookup chain picked, and why."""

    template: str
    params: dict[str, Any]
    step: str  # exact | nearest | same-arch | default
    source: str  # where the entry came from, e.g. "nvidia-h200-sm90 float32/NN/4096x4096x4096"
    entry: dict[str, Any] | None = field(default=None, compare=False)


def _dims(problem: Any) -> tuple[int, ...]:
    """The sizes that measure how near two problems are: M, N, K for GEMM, a family's ``dims`` otherwise."""
    dims = getattr(problem, "dims", None)
    return tuple(dims) if dims is not None else (problem.M, problem.N, problem.K)


def _distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Sum of |log ratio| per dimension, on sizes plus one: padding 0 (or any zero) is a size, not log(0)."""
    return sum(abs(math.log((x + 1) / (y + 1))) for x, y in zip(a, b, strict=True))


def _usable(kernel: str, key: str, entry: dict[str, Any], where: str) -> bool:
    family = FAMILIES[kernel]
    template = entry.get("template")
    if entry.get("verified") is not True or template not in family.templates:
        log.debug("skip %s %s: not a verified entry of a known template", where, key)
        return False
    if not fits_installed(kernel, template, dict(entry.get("params", {}))):
        log.debug("skip %s %s: its parameters do not fit the installed template", where, key)
        return False
    dtype, layout, label = key.split("/")
    if not installed_renders(kernel, entry, family.problem(label, dtype, layout)):
        current = template_hash(kernel, template)
        log.debug(
            "skip %s %s: tuned with template %s, installed is %s and renders another source", where, key,
            entry.get("template_hash"), current,
        )  # fmt: skip
        return False
    return True


def _fits(kernel: str, key: str, entry: dict[str, Any], problem: Any) -> bool:
    reason = FAMILIES[kernel].check_problem(entry["template"], entry["params"], problem)
    if reason:
        log.debug("skip %s for %s: %s", key, problem.label, reason)
    return reason is None


def _search_doc(kernel: str, doc: dict[str, Any], gpu_key: str, problem: Any, layout: str) -> Choice | None:
    """Exact entry, else the nearest usable shape of the same dtype and layout whose config fits this shape."""
    return next(_ranked_doc(kernel, doc, gpu_key, problem, layout), None)


def _ranked_doc(kernel: str, doc: dict[str, Any], gpu_key: str, problem: Any, layout: str) -> Iterator[Choice]:
    """The exact entry if usable and fitting, then the usable entries of the same dtype and layout whose
    configs fit this shape, nearest first."""
    family = FAMILIES[kernel]
    exact = f"{problem.dtype}/{layout}/{problem.label}"
    entries = doc.get("entries", {})
    if exact in entries and _usable(kernel, exact, entries[exact], gpu_key) and _fits(kernel, exact, entries[exact],
                                                                                      problem):  # fmt: skip
        e = entries[exact]
        yield Choice(e["template"], dict(e["params"]), "exact", f"{gpu_key} {exact}", e)
    dims = _dims(problem)
    near: list[tuple[float, str]] = []
    for key, e in entries.items():
        dtype, lay, label = key.split("/")
        if dtype != problem.dtype or lay != layout or not _usable(kernel, key, e, gpu_key):
            continue
        other = family.problem(label, dtype, lay)
        if len(_dims(other)) == len(dims):
            near.append((_distance(dims, _dims(other)), key))
    for _, key in sorted(near):
        if key != exact and _fits(kernel, key, entries[key], problem):
            e = entries[key]
            yield Choice(e["template"], dict(e["params"]), "nearest", f"{gpu_key} {key}", e)


def ranked_choices(kernel: str, problem: Any, gpu_key: str, arch: str, tuned_dir: Path, layout: str,
                   limit: int = 3) -> list[Choice]:  # fmt: skip
    """Up to ``limit`` stored winners that fit ``problem``, nearest first: this GPU's, then its architecture's
    (an unreadable results file is passed over, with a debug line)."""
    suffix = "-" + arch.replace("_", "")
    paths = [tuned_file(tuned_dir, gpu_key, kernel)]
    paths += sorted(p for p in tuned_dir.glob(f"*{suffix}/{kernel}.json") if p.parent.name != gpu_key)
    found: list[Choice] = []
    for path in paths:
        doc = read_or_empty(path)
        step = None if path.parent.name == gpu_key else "same-arch"
        for c in _ranked_doc(kernel, doc, path.parent.name, problem, layout):
            found.append(Choice(c.template, c.params, step or c.step, c.source, c.entry))
            if len(found) >= limit:
                return found
    return found


def choose(kernel: str, problem: Any, gpu_key: str, arch: str, tuned_dir: Path, layout: str | None = None) -> Choice:
    """Walk the lookup chain for ``problem`` on the GPU ``gpu_key`` (of architecture ``arch``)."""
    layout = layout or getattr(problem, "layout", "NN")
    own = tuned_file(tuned_dir, gpu_key, kernel)
    if own.exists():
        found = _search_doc(kernel, read_or_empty(own), gpu_key, problem, layout)
        if found is not None:
            log.debug("%s %s: %s config from %s", kernel, problem.label, found.step, found.source)
            return found
    suffix = "-" + arch.replace("_", "")
    others = sorted(p for p in tuned_dir.glob(f"*{suffix}/{kernel}.json") if p.parent.name != gpu_key)
    for path in others:
        found = _search_doc(kernel, read_or_empty(path), path.parent.name, problem, layout)
        if found is not None:
            choice = Choice(found.template, found.params, "same-arch", found.source, found.entry)
            log.debug("%s %s: same-arch config from %s", kernel, problem.label, choice.source)
            return choice
    try:
        template, params = FAMILIES[kernel].default_config(problem.dtype, layout)
    except ValueError as exc:
        raise AutotuneError(f"{kernel} {problem.label}: {exc}") from None
    log.debug("%s %s: no tuned entry applies; default %s config", kernel, problem.label, template)
    return Choice(template, params, "default", "default")


# --- compiling with a cache ----------------------------------------------------------------------------


class CubinCache:
    """Cubins by (rendered source hash, arch, options, NVRTC version): in process and on disk. Thread-safe."""

    def __init__(self, directory: Path | None = None, options: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.options = options
        self._mem: dict[str, CompileResult] = {}
        self._lock = threading.Lock()
        self.compiles = 0

    def key(self, source_hash: str, arch: str) -> str:
        text = "|".join([source_hash, arch, " ".join(self.options), nvrtc_version()])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def get(self, source: str, source_hash: str, kernel_name: str, arch: str) -> CompileResult:
        key = self.key(source_hash, arch)
        with self._lock:
            if key in self._mem:
                return self._mem[key]
            path = (self.directory or cache_dir()) / "cubin" / f"{key}.cubin"
            if path.is_file():
                result = CompileResult(kernel_name, path.read_bytes(), "disk cache", 0.0)
            else:
                result = compile_source(source, kernel_name, arch, self.options)
                self.compiles += 1
                if not result.ok:
                    raise AutotuneError(f"{kernel_name} does not compile for {arch}: {result.error}")
                _write_atomic(path, result.cubin)  # type: ignore[arg-type]
            self._mem[key] = result
            return result


def _write_atomic(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache costs compiles, not correctness
        log.debug("cannot write the cubin cache %s: %s", path, exc)


_cache = CubinCache()
_launchers: dict[tuple, Launcher | VendorLauncher] = {}
_by_call: dict[tuple, Launcher | VendorLauncher] = {}  # gemm()'s own memo: skips building a problem on every call
_hot: dict[tuple, tuple[Launcher | VendorLauncher, bool, bool]] = {}  # call signature -> launcher, transposed?
_launchers_lock = threading.Lock()
generation = 0  # bumped by forget_launchers: caches outside (the torch drop-in's plans) compare it per call


@functools.cache
def _gpu(device_id: int) -> tuple[str, str]:
    from ..core.device import current_gpu

    gpu = current_gpu(device_id)
    return gpu.key, gpu.arch


def _problem(kernel: str, dtype: str, layout: str | None, shape: dict[str, int]) -> tuple[Any, str]:
    """The family's problem record for ``load``'s arguments; AutotuneError with one sentence if they are bad."""
    if kernel not in FAMILIES:
        raise AutotuneError(f"unknown kernel family {kernel!r}; expected one of {', '.join(FAMILIES)}")
    family = FAMILIES[kernel]
    layout = layout or family.layouts[0]
    try:
        return family.load_problem(shape, dtype, layout), layout
    except (ValueError, TypeError) as exc:
        raise AutotuneError(f"load({kernel!r}, ...): {exc}") from None


def load(kernel: str = "gemm", *, dtype: str = "float32", layout: str | None = None,
         tuned_dir: str | Path | None = None, online: bool | None = None,
         **shape: int) -> Launcher | VendorLauncher:  # fmt: skip
    """A reusable launcher for one problem, e.g. ``load("gemm", M=4096, N=4096, K=4096)`` or
    ``load("conv2d", N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1)``; ``layout`` defaults to the
    family's first (GEMM "NN", convolution "NCHW").

    What serves it (see ``autotune.serve.dispatch``): the exact stored winner if it beat the vendor, else the online
    choice (measured on the first call, remembered in the user cache; ``online=False``, ``set_online(False)``
    or ``AUTOTUNE_ONLINE=0`` turn it off), else the vendor library (a ``VendorLauncher``, called the same way).
    ``launcher.provenance`` says which and why.
    """
    import cupy as cp

    from . import serving

    problem, layout = _problem(kernel, dtype, layout, shape)
    tdir = Path(tuned_dir) if tuned_dir is not None else default_tuned_dir()
    device_id = cp.cuda.Device().id
    on = dispatch.online_enabled(online)
    memo = (kernel, problem, layout, str(tdir), device_id, on, dispatch.vendor_enabled())
    with _launchers_lock:
        if memo in _launchers:
            return _launchers[memo]
    gpu_key, arch = _gpu(device_id)
    try:
        lookup: Choice | None = choose(kernel, problem, gpu_key, arch, tdir, layout)
    except AutotuneError as exc:  # no template of ours computes it: the vendor serves
        log.debug("%s", exc)
        lookup = None
    try:
        template, params = FAMILIES[kernel].default_config(problem.dtype, layout)
        default: Choice | None = Choice(template, params, "default", "default")
    except ValueError:
        default = None
    launcher = serving.serve(
        kernel, problem, lookup, ranked=ranked_choices(kernel, problem, gpu_key, arch, tdir, layout), default=default,
        gpu_key=gpu_key, cache=cache_dir(), build_ours=lambda c: build_launcher(kernel, problem, c, arch),
        make_choice=Choice, online_on=on,
    )  # fmt: skip
    if not launcher.provisional:  # a decision made during graph capture is made again on the next call
        with _launchers_lock:
            _launchers[memo] = launcher
    return launcher


def build_launcher(kernel: str, problem: Any, choice: Choice, arch: str) -> Launcher:
    """Our kernel for ``problem`` in configuration ``choice``: rendered, compiled (cubin cache), loaded."""
    family = FAMILIES[kernel]
    reason = family.check_problem(choice.template, choice.params, problem)
    if reason:
        raise AutotuneError(f"{kernel} {problem.label}: the {choice.step} configuration {reason}")
    rendered = render(kernel, choice.template, choice.params, problem)
    compiled = _cache.get(rendered.source, rendered.source_hash, rendered.kernel_name, arch)
    launch = family.launch(choice.template, choice.params, problem)
    from ..measure.evaluate import load_kernel

    fn = load_kernel(compiled, launch.shared_bytes)
    new_scratch = None
    if family.scratch(choice.template, choice.params, problem) is not None:
        new_scratch = functools.partial(family.new_scratch, choice.template, dict(choice.params), problem)
    if launch.before:
        steps = tuple((load_kernel(compiled, s.shared_bytes, s.kernel_name), s) for s in launch.before)
        return StagedLauncher(kernel, problem, choice, fn, launch, rendered.kernel_name, new_scratch, steps)
    return Launcher(kernel, problem, choice, fn, launch, rendered.kernel_name, new_scratch)


def forget_launchers() -> None:
    """Drop every memoized launcher and call signature (after ``set_online``, say): the next call decides again."""
    global generation
    with _launchers_lock:
        _launchers.clear()
        _by_call.clear()
        _hot.clear()
        generation += 1
    if "autotune.serve.torch_calls" in sys.modules:  # gemm()'s signatures of torch tensors
        sys.modules["autotune.serve.torch_calls"].forget()


dispatch.on_setting_change(forget_launchers)  # set_online: decisions made under the other setting no longer apply
