"""``autotune export``: the best parameters per GPU and shape as a C/C++ header plus rendered .cu files.

For users outside Python: each tuned entry becomes one row of a table in ``autotune_tuned.h`` (GPU key,
dtype, layout, shape, kernel name, launch geometry, the parameters) and one ``.cu`` file with the
rendered source, so the kernel can be compiled with nvcc or NVRTC and launched from C++. Each ``.cu`` file
starts with the line that builds it (``nvcc -c -arch=<arch> -std=c++17 <file>``; ``sm_90a`` for sources that
need wgmma or TMA) and wraps the rendered source, unchanged, in guards for nvcc's host pass. Entries that
cannot be exported (malformed, or parameters the installed template refuses) are skipped with one warning.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from pathlib import Path
from typing import Any

from ..build.compiler import target_arch
from ..build.templates import fits_installed, installed_renders, render
from ..kernels import FAMILIES
from .store import read

log = logging.getLogger(__name__)


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def export(tuned_dir: Path, out_dir: Path) -> list[Path]:
    """Write the header and the sources; returns the written paths (the header first)."""
    rows: list[dict[str, Any]] = []
    written: list[Path] = []
    for path in sorted(tuned_dir.glob("*/*.json")):
        if path.stem not in FAMILIES:
            log.warning("%s: skipped: autotune has no kernel family %r", path, path.stem)
            continue
        doc = read(path)  # bad entries are skipped there, with a warning; an unreadable file is a StoreError
        arch = _arch(doc, path.parent.name)
        for key, e in doc["entries"].items():
            why = _unexportable(path.stem, key, e)
            if why:
                log.warning("%s: skipped entry %r: %s", path, key, why)
                continue
            row, src = _export_entry(path.stem, path.parent.name, arch, key, e, out_dir)
            rows.append(row)
            written.append(src)
    out_dir.mkdir(parents=True, exist_ok=True)
    header = out_dir / "autotune_tuned.h"
    header.write_text(_header(rows, tuned_dir))
    written.insert(0, header)
    return written


def _arch(doc: dict[str, Any], gpu_key: str) -> str | None:
    """The GPU's architecture (``sm_90``): the file's header, else the GPU key's suffix (``...-sm90``)."""
    arch = (doc.get("gpu") or {}).get("arch")
    if isinstance(arch, str) and re.fullmatch(r"sm_\d+a?", arch):
        return arch
    m = re.search(r"-sm(\d+a?)$", gpu_key)
    return f"sm_{m.group(1)}" if m else None


def _unexportable(kernel: str, key: str, e: dict[str, Any]) -> str | None:
    """Why a (valid) entry cannot be exported by the installed templates, or None."""
    family = FAMILIES[kernel]
    if e["template"] not in family.templates:
        return f"template {e['template']!r} is not one of {kernel}'s ({', '.join(family.templates)})"
    if not fits_installed(kernel, e["template"], dict(e["params"])):
        return f"its parameters do not fit the installed {e['template']} template"
    dtype, layout, label = key.split("/")
    return family.check_problem(e["template"], e["params"], family.problem(label, dtype, layout))


def _export_entry(kernel: str, gpu_key: str, arch: str | None, key: str, e: dict[str, Any],
                  out_dir: Path) -> tuple[dict[str, Any], Path]:  # fmt: skip
    """Write one entry's source; returns its header row and the written path."""
    family = FAMILIES[kernel]
    dtype, layout, label = key.split("/")
    problem = family.problem(label, dtype, layout)
    rendered = render(kernel, e["template"], e["params"], problem)
    launch = family.launch(e["template"], e["params"], problem)
    src = out_dir / gpu_key / f"{rendered.kernel_name}.cu"
    src.parent.mkdir(parents=True, exist_ok=True)
    stale = not installed_renders(kernel, e, problem)
    note = " (NOTE: tuned with an older template; re-tune before relying on its speed)" if stale else ""
    target = target_arch(rendered.source, arch) if arch else None
    src.write_text(f"// autotune export: {gpu_key} {key}{note}\n" + source_file(rendered.source, src.name, target))
    scratch = family.scratch(e["template"], e["params"], problem) or (0, 0)
    mnk = family.matrix_dims(problem)  # 0, 0, 0 for a family whose problems are not a matrix product
    row = {
        "gpu": gpu_key, "kernel": kernel, "template": e["template"], "dtype": dtype, "layout": layout, "shape": label,
        "M": mnk[0], "N": mnk[1], "K": mnk[2],
        "name": rendered.kernel_name, "file": f"{gpu_key}/{src.name}", "grid": launch.grid,
        "block": launch.block, "shared": launch.shared_bytes, "scratch": scratch,
        "params": ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in e["params"].items()),
        "median_ms": e.get("median_ms") or 0.0, "vendor_ratio": e.get("vendor_ratio") or 0.0,
        "before": ";".join(f"{s.kernel_name} {' '.join(map(str, s.grid))} {s.block[0]} {s.shared_bytes}"
                           for s in launch.before),
        "arch": target or "",
    }  # fmt: skip
    return row, src


# Functions that the templates call in the non-device branches of device functions are the host emulation's
# (the project's CPU tests define them; their names start with host_). nvcc's host pass parses those branches.
_HOST_HOOK = re.compile(r"\b(host_[A-Za-z0-9_]+)\s*(?:<[^<>;(){}]*>)?\s*\(")


def build_line(arch: str | None, name: str) -> str:
    """The nvcc command that builds an exported source for ``arch``.

    An arch-specific target (``sm_90a``) is named as ``-arch=compute_90a -code=sm_90a``: ``-arch=sm_90a`` alone
    makes nvcc 13 also embed generic ``compute_90`` PTX, which cannot hold wgmma (the source's ``#error`` says so).
    """
    if not arch:
        return f"nvcc -c -arch=<your GPU's sm_XX> -std=c++17 {name}"
    if arch.endswith("a"):
        return f"nvcc -c -arch={arch.replace('sm_', 'compute_')} -code={arch} -std=c++17 {name}"
    return f"nvcc -c -arch={arch} -std=c++17 {name}"


def source_file(source: str, name: str, arch: str | None) -> str:
    """A rendered source as an exported file: the build line, guards for nvcc's host pass, the source unchanged.

    nvcc compiles a .cu file twice: for the device (``__CUDA_ARCH__`` defined) and for the host, which parses
    device functions too. Two things in rendered sources are meant for the device pass only: an architecture
    check (``#error`` unless ``__CUDA_ARCH_FEAT_SM90_ALL``, in sources for ``sm_90a``), and calls to the host
    emulation in ``#else`` branches of ``__CUDA_ARCH__``. The host pass gets the feature macro for the length
    of the source, and inert declarations of those functions (never defined, never called by a compiled
    kernel). NVRTC compiles the device pass alone, so none of this applies there.
    """
    head = [
        f"// build: {build_line(arch, name)}   (NVRTC: -arch={arch or 'sm_XX'} -std=c++17; launch: autotune_tuned.h)"
    ]
    tail = []
    feature = re.fullmatch(r"sm_(\d+)a", arch or "")
    if feature:
        macro = f"__CUDA_ARCH_FEAT_SM{feature.group(1)}_ALL"
        head += [
            f"#if defined(__CUDACC__) && !defined(__CUDA_ARCH__) && !defined({macro})",
            f"#define {macro} 1  // nvcc's host pass: the source's {arch} check is for the device pass",
            "#define AUTOTUNE_EXPORT_HOST_FEATURE 1",
            "#endif",
        ]
        tail = [
            "#ifdef AUTOTUNE_EXPORT_HOST_FEATURE",
            f"#undef {macro}",
            "#undef AUTOTUNE_EXPORT_HOST_FEATURE",
            "#endif",
        ]
    hooks = sorted(set(_HOST_HOOK.findall(source)))
    if hooks:
        head += [
            "#if defined(__CUDACC__) && !defined(__CUDA_ARCH__)",
            "// nvcc's host pass parses the host-emulation branches of device functions: declared, never defined",
        ]
        head += [f"template <int... I, typename... A> __device__ void {h}(A&&...);" for h in hooks]
        head += ["#endif"]
    body = source if source.endswith("\n") else source + "\n"
    return "\n".join(head) + "\n" + body + ("\n".join(tail) + "\n" if tail else "")


_BUILD = [
    "/* Build: each source's second line is the command that builds it: nvcc -c -arch=<arch> -std=c++17 <file>.cu",
    "   with <arch> the row's `arch`; for sources that use wgmma or TMA (`arch` sm_90a: they run on Hopper only)",
    "   nvcc -c -arch=compute_90a -code=sm_90a -std=c++17 <file>.cu (-arch=sm_90a alone also builds generic",
    "   compute_90 PTX, which cannot hold wgmma). NVRTC: -arch=<arch> -std=c++17. CUDA headers only.",
    "   One row per tuned (GPU, kernel, dtype, layout, shape). Launch `kernel_name` from `source_file`",
    "   on a (grid_x, grid_y, grid_z) grid of `block_threads`-thread blocks with `shared_bytes` of dynamic",
    "   shared memory (above 48 KB, raise the kernel's limit first). Scratch buffers hold `scratch_floats`",
    "   floats and `scratch_counters` unsigned ints, zeroed once before the first launch (the kernels leave the",
    "   counters zero). `before` lists kernels of the same source to launch first, in order, on the same",
    "   stream, each as `name grid_x grid_y grid_z block_threads shared_bytes`, ';' between them.",
    "   The arguments of each exported template: */",
]


def _abi(rows: list[dict[str, Any]]) -> list[str]:
    """The build paragraph, then the C arguments of each (family, template) the rows use, in the words of the
    template's own module (``Template.c_abi``)."""
    import textwrap

    lines = list(_BUILD)
    for kernel, template in sorted({(r["kernel"], r["template"]) for r in rows}):
        text = FAMILIES[kernel].c_abi(template)
        wrapped = textwrap.wrap(f"{kernel} {template}: {text}", 112)
        lines += ["/* " + wrapped[0], *("   " + w for w in wrapped[1:])]
        lines[-1] += " */"
    return lines


def _header(rows: list[dict[str, Any]], tuned_dir: Path) -> str:
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    lines = [
        f"/* Generated by `autotune export` from {tuned_dir} on {date}. Do not edit. */",
        "#ifndef AUTOTUNE_TUNED_H",
        "#define AUTOTUNE_TUNED_H",
        "",
        *_abi(rows),
        "typedef struct {",
        "  const char* gpu_key; const char* kernel; const char* dtype; const char* layout; const char* shape;",
        "  int M, N, K; /* gemm only */",
        "  const char* kernel_name; const char* source_file;",
        "  unsigned grid_x, grid_y, grid_z, block_threads, shared_bytes;",
        "  unsigned long long scratch_floats, scratch_counters;",
        "  const char* params;",
        "  double median_ms, vendor_ratio;",
        "  const char* before;",
        "  const char* arch; /* the -arch its source builds for */",
        "} autotune_tuned_config;",
        "",
        "static const autotune_tuned_config AUTOTUNE_TUNED_CONFIGS[] = {",
    ]
    lines += [_row(r) for r in rows]
    lines += [
        "};",
        f"static const unsigned AUTOTUNE_TUNED_COUNT = {len(rows)}u;",
        "",
        "#endif /* AUTOTUNE_TUNED_H */",
        "",
    ]
    return "\n".join(lines)


def _row(r: dict[str, Any]) -> str:
    """One initializer of AUTOTUNE_TUNED_CONFIGS, in the struct's field order."""
    strings = [_c_string(r[k]) for k in ("gpu", "kernel", "dtype", "layout", "shape")]
    sizes = [str(r[k]) for k in ("M", "N", "K")]
    launch = [f"{v}u" for v in (*r["grid"], r["block"][0], r["shared"])] + [f"{v}ull" for v in r["scratch"]]
    timing = [repr(float(r["median_ms"])), repr(float(r["vendor_ratio"]))]
    fields = [*strings, *sizes, _c_string(r["name"]), _c_string(r["file"]), *launch, _c_string(r["params"]), *timing]
    return "  {" + ", ".join([*fields, _c_string(r["before"]), _c_string(r["arch"])]) + "},"
