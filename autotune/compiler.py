"""NVRTC through CuPy's low-level binding: source -> cubin plus the ptxas resource report.

Only ``cupy.cuda.nvrtc`` is used here, which works on a machine without a GPU or driver when the
architecture is given explicitly, so ``--compile-only`` and the CPU tests compile for sm_90.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import AutotuneError, HeadersNotFoundError

_INCLUDE = re.compile(r"^\s*#\s*include\s*<([^>]+)>", re.MULTILINE)
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class CompileResult:
    """A cubin and its resources, or the reason there is none."""

    kernel_name: str
    cubin: bytes | None
    log: str
    seconds: float
    registers: int | None = None
    static_smem: int | None = None
    stack_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.cubin is not None

    @property
    def spills(self) -> int:
        return (self.spill_stores or 0) + (self.spill_loads or 0)


def nvrtc_version() -> str:
    from cupy.cuda import nvrtc

    major, minor = nvrtc.getVersion()
    return f"{major}.{minor}"


def _candidate_include_dirs() -> list[Path]:
    dirs: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = Path(nvcc).resolve()
        dirs += [real.parent.parent / "include", Path(nvcc).parent.parent / "include"]
    dirs += [Path("/usr/local/cuda/include")]
    try:
        from cupy.cuda import get_cuda_path

        cuda_path = get_cuda_path()
        if cuda_path:
            dirs.append(Path(cuda_path) / "include")
    except Exception:  # noqa: BLE001 - CuPy without a toolkit is fine; other places may have headers
        pass
    for entry in sys.path:
        base = Path(entry) / "nvidia"
        if base.is_dir():
            dirs += sorted(base.glob("*/include")) + sorted(base.glob("*/*/include"))
    unique: list[Path] = []
    for d in dirs:
        if d.is_dir() and d not in unique:
            unique.append(d)
    return unique


@functools.cache
def include_dirs_for(headers: tuple[str, ...]) -> tuple[str, ...]:
    """The first discovered CUDA include directory that has every header in ``headers``."""
    if not headers:
        return ()
    searched = _candidate_include_dirs()
    for d in searched:
        if all((d / h).is_file() for h in headers):
            return (str(d),)
    places = ", ".join(str(d) for d in searched) or "none found"
    raise HeadersNotFoundError(
        f"no CUDA include directory has {', '.join(headers)} (searched: {places}); "
        "set CUDA_HOME to a CUDA toolkit, or put its nvcc on PATH"
    )


def compile_source(source: str, kernel_name: str, arch: str, options: tuple[str, ...] = ()) -> CompileResult:
    """Compile one rendered candidate for ``arch`` (e.g. ``sm_90``). Never raises for a bad kernel."""
    from cupy.cuda import nvrtc

    headers = tuple(sorted(set(_INCLUDE.findall(source)) - {"cuda_runtime.h"}))
    includes = include_dirs_for(headers)
    opts = [f"-arch={arch}", "-std=c++17", "--ptxas-options=-v", "-default-device", *options]
    opts += [f"-I{d}" for d in includes]
    start = time.perf_counter()
    prog = nvrtc.createProgram(source, f"{kernel_name}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            log = nvrtc.getProgramLog(prog)
            first = next((ln for ln in log.splitlines() if "error" in ln), log.strip()[:200])
            return CompileResult(kernel_name, None, log, time.perf_counter() - start, error=first.strip())
        log = nvrtc.getProgramLog(prog)
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    seconds = time.perf_counter() - start
    return _with_resources(CompileResult(kernel_name, cubin, log, seconds))


def _with_resources(r: CompileResult) -> CompileResult:
    regs = _REGS.search(r.log)
    smem = _SMEM.search(r.log)
    spill = _SPILL.search(r.log)
    return CompileResult(
        r.kernel_name,
        r.cubin,
        r.log,
        r.seconds,
        registers=int(regs.group(1)) if regs else None,
        static_smem=int(smem.group(1)) if smem else 0,
        stack_bytes=int(spill.group(1)) if spill else None,
        spill_stores=int(spill.group(2)) if spill else None,
        spill_loads=int(spill.group(3)) if spill else None,
    )


def require_nvrtc() -> None:
    """Fail with one sentence when NVRTC cannot be loaded at all."""
    try:
        nvrtc_version()
    except ImportError:
        raise AutotuneError("CuPy is not installed; install cupy-cuda13x (see README)") from None
    except Exception as exc:  # noqa: BLE001 - any load failure means the same to the user
        raise AutotuneError(
            f"NVRTC could not be loaded ({type(exc).__name__}); install nvidia-cuda-nvrtc or a CUDA toolkit"
        ) from None
