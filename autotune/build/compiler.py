"""NVRTC through CuPy's low-level binding: source -> cubin plus the ptxas resource report.

Only ``cupy.cuda.nvrtc`` is used here, which works on a machine without a GPU or driver when the
architecture is given explicitly, so ``--compile-only`` and the CPU tests compile for sm_90.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.errors import AutotuneError, HeadersNotFoundError

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


# A rendered source that uses instructions of one architecture only (sm_90a's wgmma) says so on a line of its own;
# it is compiled for that architecture's "a" target (which runs on that architecture alone) and fails to compile
# elsewhere: the template's #error makes that a compile error, a candidate's state, never a crash.
ARCH_SPECIFIC = "#define AUTOTUNE_ARCH_SPECIFIC 1"


def target_arch(source: str, arch: str) -> str:
    """The -arch a source compiles for: ``arch``, or its "a" variant (sm_90 -> sm_90a) when the source asks."""
    return arch + "a" if ARCH_SPECIFIC in source and not arch.endswith("a") else arch


def compile_source(source: str, kernel_name: str, arch: str, options: tuple[str, ...] = ()) -> CompileResult:
    """Compile one rendered candidate for ``arch`` (e.g. ``sm_90``). Never raises for a bad kernel."""
    headers = tuple(sorted(set(_INCLUDE.findall(source)) - {"cuda_runtime.h"}))
    includes = include_dirs_for(headers)
    opts = [f"-arch={target_arch(source, arch)}", "-std=c++17", "--ptxas-options=-v", "-default-device", *options]
    opts += [f"-I{d}" for d in includes]
    cache = _cache_file(source, kernel_name, opts)
    if cache is not None and cache.is_file():
        kept = json.loads(cache.read_text())
        return CompileResult(**{**kept, "cubin": None if kept["cubin"] is None else bytes.fromhex(kept["cubin"])})
    result = _compile(source, kernel_name, opts)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**asdict(result), "cubin": result.cubin.hex() if result.cubin else None}))
        os.replace(tmp, cache)  # atomic: a concurrent reader sees the whole result or none
    return result


# Tests compile the same source many times (one configuration in several tests, and in several xdist workers):
# with AUTOTUNE_COMPILE_CACHE naming a folder, a compile's result is kept there under the hash of everything that
# decides it. Off unless set; the test suite sets it to a folder of its own session.
COMPILE_CACHE_ENV = "AUTOTUNE_COMPILE_CACHE"


def _cache_file(source: str, kernel_name: str, opts: list[str]) -> Path | None:
    folder = os.environ.get(COMPILE_CACHE_ENV)
    if not folder:
        return None
    key = "\0".join([nvrtc_version(), kernel_name, *opts, source]).encode()
    return Path(folder) / f"{hashlib.sha256(key).hexdigest()}.json"


def _compile(source: str, kernel_name: str, opts: list[str]) -> CompileResult:
    from cupy.cuda import nvrtc

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


def kernel_log(log: str, kernel_name: str) -> str:
    """The ptxas report of one kernel when the source has several (im2col_gemm), else the whole log."""
    if log.count("Compiling entry function") < 2:
        return log
    pattern = rf"Compiling entry function '{re.escape(kernel_name)}'.*?(?=Compiling entry function|\Z)"
    m = re.search(pattern, log, re.DOTALL)
    return m.group(0) if m else ""


def kernel_resources(r: CompileResult, kernel_name: str) -> tuple[int | None, int]:
    """(registers, spilled bytes) of one kernel of a compiled source: from its ptxas report, else the cubin."""
    part = kernel_log(r.log, kernel_name)
    regs, spill = _REGS.search(part), _SPILL.search(part)
    if regs and spill:
        return int(regs.group(1)), int(spill.group(2)) + int(spill.group(3))
    registers, stack = cubin_resources(r.cubin or b"", kernel_name)
    return registers, 2 * (stack or 0)  # counted as stores and loads, as _with_resources does


def _with_resources(r: CompileResult) -> CompileResult:
    part = kernel_log(r.log, r.kernel_name)
    regs = _REGS.search(part)
    smem = _SMEM.search(part)
    spill = _SPILL.search(part)
    if regs and spill:
        registers, stack = int(regs.group(1)), int(spill.group(1))
        stores, loads = int(spill.group(2)), int(spill.group(3))
    else:
        # NVRTC 13.0 answers a repeated compile from its cache without running ptxas, so the log has no
        # resource report; the cubin's own attributes carry the register count and the stack frame.
        # These templates keep no arrays in local memory, so a stack frame means spilled registers.
        registers, stack = cubin_resources(r.cubin or b"", r.kernel_name)
        stores = loads = stack
    return CompileResult(
        r.kernel_name,
        r.cubin,
        r.log,
        r.seconds,
        registers=registers,
        static_smem=int(smem.group(1)) if smem else 0,
        stack_bytes=stack,
        spill_stores=stores,
        spill_loads=loads,
    )


_EIATTR_FRAME_SIZE, _EIATTR_REGCOUNT = 0x11, 0x2F
_EIFMT_SVAL = 0x04


def cubin_resources(cubin: bytes, kernel_name: str) -> tuple[int | None, int | None]:
    """(registers, stack frame bytes) of ``kernel_name`` read from a cubin's ``.nv.info`` attributes.

    The attributes are records of (format, attribute, payload); per-function ones carry the index of the
    function's symbol. Returns (None, None) for anything that does not parse.
    """
    try:
        return _cubin_resources(cubin, kernel_name)
    except (struct.error, ValueError, IndexError):
        return None, None


def _cubin_resources(b: bytes, kernel_name: str) -> tuple[int | None, int | None]:
    if b[:4] != b"\x7fELF" or b[4] != 2:  # 64-bit ELF only
        return None, None
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names_off = headers[shstrndx][4]

    def name(h: tuple) -> str:
        start = names_off + h[0]
        return b[start : b.index(b"\0", start)].decode()

    by_name = {name(h): h for h in headers}
    symtab = by_name.get(".symtab")
    info = by_name.get(".nv.info")
    if symtab is None or info is None:
        return None, None
    strtab = headers[symtab[6]]  # sh_link of the symbol table names its string table
    symbol = None
    for i in range(symtab[5] // 24):
        st_name = struct.unpack_from("<I", b, symtab[4] + 24 * i)[0]
        start = strtab[4] + st_name
        if b[start : b.index(b"\0", start)] == kernel_name.encode():
            symbol = i
            break
    if symbol is None:
        return None, None
    registers = stack = None
    pos, end = info[4], info[4] + info[5]
    while pos + 4 <= end:
        fmt, attr = b[pos], b[pos + 1]
        if fmt != _EIFMT_SVAL:
            pos += 4
            continue
        size = struct.unpack_from("<H", b, pos + 2)[0]
        if size == 8:
            sym, value = struct.unpack_from("<II", b, pos + 4)
            if sym == symbol and attr == _EIATTR_REGCOUNT:
                registers = value
            elif sym == symbol and attr == _EIATTR_FRAME_SIZE:
                stack = value
        pos += 4 + size
    return registers, stack


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
