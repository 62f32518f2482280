"""GEMM, C[M, N] = alpha * op(A) @ op(B) + beta * C[M, N], C row-major.

The layout names op(): "NN" takes A (M x K) and B (K x N) row-major as given; a "T" stores that operand
transposed (A as K x M, B as N x K), the way a column-major caller or a ``.T`` view hands it over.
Dtypes: float32, float16, bfloat16 (inputs and C in that type, fp32 accumulation), and tfloat32
(float32 arrays, tf32 tensor-core math: lower precision, its own tolerance).

Derived quantities (threads, warp iterations, shared memory) are computed here and in the per-template
modules (gemm_wmma.py, gemm_mma.py), and only there; the templates receive them in their render context and mirror
each check with a ``static_assert``. The "auto" template makes the template itself a search dimension:
its TEMPLATE parameter picks one, and the other parameters exist under their template's branch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import gemm_mma, gemm_skinny, gemm_skinny_nt, gemm_skinny_tc, gemm_skinny_wgmma, gemm_wmma
from .base import Launch, Params, TemplateInfo, auto_info, check_auto

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "tfloat32": 4}
CTYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "tfloat32": "float"}
SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "tfloat32": "tf32"}
LAYOUTS = ("NN", "NT", "TN", "TT")
MAX_THREADS = 1024
MAX_DIM = 2**31 - 1 - 4096  # kernels index with int; keep k0 + tile offsets from wrapping
MAX_GRID_Y = 65535
MAX_ACCUMULATORS = 128  # per thread; above this the register file spills on every architecture we target


@dataclass(frozen=True)
class GemmProblem:
    M: int
    N: int
    K: int
    dtype: str
    layout: str = "NN"

    @property
    def label(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    @property
    def bytes(self) -> int:
        """Fewest bytes a GEMM moves: A and B read once, C written once."""
        return (self.M * self.K + self.K * self.N + self.M * self.N) * ITEMSIZE[self.dtype]

    @property
    def storage(self) -> str:
        """The array dtype of A, B and C (bfloat16 travels as its 16 bits: CuPy has no bfloat16 type)."""
        return {"tfloat32": "float32", "bfloat16": "uint16"}.get(self.dtype, self.dtype)


def bf16_bits(x: Any) -> Any:
    """float32 CuPy array -> bfloat16 bits (uint16), rounded to nearest even."""
    import cupy as cp

    u = x.astype(cp.float32).view(cp.uint32)
    return ((u + cp.uint32(0x7FFF) + ((u >> 16) & cp.uint32(1))) >> 16).astype(cp.uint16)


def decode(x: Any, dtype: str) -> Any:
    """A GEMM array as numbers: bfloat16 bits widened to float32, anything else unchanged."""
    import cupy as cp

    return (x.astype(cp.uint32) << 16).view(cp.float32) if dtype == "bfloat16" else x


def variant(dtype: str, layout: str, align_a: bool = True, align_b: bool = True) -> dict[str, Any]:
    """What a template's source depends on besides its parameters: element type, operand layout, and
    whether each operand's leading dimension is a whole number of 16-byte vectors (never the shape)."""
    return {"DTYPE": dtype, "T": CTYPE[dtype], "ES": ITEMSIZE[dtype], "LAYOUT": layout, "TRANS_A": layout[0] == "T",
            "TRANS_B": layout[1] == "T", "ALIGN_A": align_a, "ALIGN_B": align_b}  # fmt: skip


def problem_variant(p: GemmProblem) -> dict[str, Any]:
    per_vector = 16 // ITEMSIZE[p.dtype]
    lda = p.M if p.layout[0] == "T" else p.K
    ldb = p.K if p.layout[1] == "T" else p.N
    return variant(p.dtype, p.layout, lda % per_vector == 0, ldb % per_vector == 0)


SIMT_PARAMS = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "VEC", "PAD", "DBUF")
# Templates rendered with a dtype/layout variant, each described by its own module.
MODULES: dict[str, Any] = {
    "wmma": gemm_wmma,
    "mma": gemm_mma,
    "skinny": gemm_skinny,
    "skinny_tc": gemm_skinny_tc,
    "skinny_wgmma": gemm_skinny_wgmma,
    "skinny_nt": gemm_skinny_nt,
}


class GemmFamily:
    name = "gemm"
    shape_help = "[M, N, K] or 'MxNxK' with positive integers"
    layouts = LAYOUTS
    templates = {
        "naive": TemplateInfo("naive", ("BX", "BY"), ("float32",), "one thread per output, no tiling", layouts=("NN",)),
        "simt": TemplateInfo(
            "simt",
            SIMT_PARAMS,
            ("float32",),
            "block, warp and register tiled SIMT",
            kinds=(("PAD", "int>=0"), ("DBUF", "bool")),
            layouts=("NN",),
        ),  # fmt: skip
        **{
            n: TemplateInfo(
                n,
                m.PARAMS,
                tuple(m.DTYPES),
                m.DESCRIPTION,
                kinds=m.KINDS,
                layouts=tuple(getattr(m, "LAYOUTS", LAYOUTS)),
            )
            for n, m in MODULES.items()
        },  # fmt: skip
    }
    templates["auto"] = auto_info(templates, LAYOUTS, skip=("naive",))

    def problem(self, shape: Any, dtype: str, layout: str = "NN") -> GemmProblem:
        if isinstance(shape, str):
            parts = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*", shape)
            dims = tuple(int(p) for p in parts.groups()) if parts else ()
        elif isinstance(shape, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            dims = tuple(shape)
        else:
            dims = ()
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError(f"expected {self.shape_help}, got {shape!r}")
        if max(dims) > MAX_DIM:
            raise ValueError(f"dimensions above {MAX_DIM} are not supported (32-bit indices), got {shape!r}")
        if dtype not in ITEMSIZE:
            raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(ITEMSIZE)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
        return GemmProblem(*dims, dtype=dtype, layout=layout)

    # --- configuration -> derived values ---------------------------------------------------------

    def resolve(self, template: str, params: Params) -> str:
        """The concrete template a configuration renders: "auto" defers to its TEMPLATE parameter."""
        return str(params.get("TEMPLATE", "")) if template == "auto" else template

    def derived(self, template: str, params: Params, problem: GemmProblem | None = None) -> dict[str, Any]:
        template = self.resolve(template, params)
        p = params
        if template in MODULES:
            v = problem_variant(problem) if problem else variant(MODULES[template].DTYPES[0], "NN")
            return MODULES[template].derived(params, v)
        if template == "naive":
            return {"THREADS": p["BX"] * p["BY"]}
        threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
        per_iter = 32 * p["TM"] * p["TN"] * p["WNITER"]
        wmiter = (p["WM"] * p["WN"]) // per_iter
        stages = 2 if p["DBUF"] else 1
        smem = stages * p["BK"] * (p["BM"] + p["PAD"] + p["BN"] + p["PAD"]) * 4
        return {"THREADS": threads, "WMITER": wmiter, "SHARED_BYTES": smem}

    def context(self, template: str, params: Params, problem: GemmProblem) -> dict[str, Any]:
        """Everything a template renders from besides the parameters: derived values and the variant."""
        return {**self.derived(template, params, problem), **problem_variant(problem)}

    def check(self, template: str, params: Params) -> str | None:
        """Why this configuration cannot be built, or None. Mirrors the templates' static_asserts."""
        if template == "auto":
            reason = check_auto(self.templates, params)
            if reason:
                return reason
            template = self.resolve(template, params)
        if template in MODULES:
            return MODULES[template].check(params)
        p = params
        if template == "naive":
            if p["BX"] * p["BY"] > MAX_THREADS:
                return f"BX*BY = {p['BX'] * p['BY']} threads exceeds {MAX_THREADS}"
            return None
        if p["BM"] % p["WM"] or p["BN"] % p["WN"]:
            return "warp tile WMxWN must divide block tile BMxBN"
        per_iter = 32 * p["TM"] * p["TN"] * p["WNITER"]
        if (p["WM"] * p["WN"]) % per_iter:
            return "warp tile WM*WN must be a multiple of 32*TM*TN*WNITER"
        d = self.derived(template, p)
        wmiter, threads = d["WMITER"], d["THREADS"]
        if p["WM"] % wmiter or p["WN"] % p["WNITER"]:
            return "warp sub-tiles must divide the warp tile"
        wsubm, wsubn = p["WM"] // wmiter, p["WN"] // p["WNITER"]
        if wsubm % p["TM"] or wsubn % p["TN"] or (wsubm // p["TM"]) * (wsubn // p["TN"]) != 32:
            return "the 32 lanes of a warp must tile a warp sub-tile exactly"
        if threads > MAX_THREADS:
            return f"{threads} threads per block exceeds {MAX_THREADS}"
        if p["VEC"] not in (1, 2, 4):  # the template has float, float2 and float4 loads (Vec<1|2|4>)
            return "VEC must be 1, 2 or 4"
        if p["BK"] % p["VEC"] or p["BN"] % p["VEC"]:
            return "VEC must divide BK and BN"
        if (p["BM"] * p["BK"] // p["VEC"]) % threads or (p["BK"] * p["BN"] // p["VEC"]) % threads:
            return "tile loads must split evenly over the threads"
        if wmiter * p["TM"] * p["WNITER"] * p["TN"] > MAX_ACCUMULATORS:
            return f"more than {MAX_ACCUMULATORS} accumulators per thread"
        return None

    def default_config(self, dtype: str, layout: str = "NN", M: int | None = None) -> tuple[str, dict[str, Any]]:
        """The runtime's last resort: a configuration the GPU test tier verifies on odd shapes. With B stored N x K
        (nn.Linear's weight), skinny_nt reads it in place: for float32 always, for 16 bits when M <= 64 is given."""
        nt = layout in gemm_skinny_nt.LAYOUTS and dtype in gemm_skinny_nt.DTYPES
        if nt and (dtype == "float32" or (M is not None and M <= gemm_skinny_nt.DECODE_M)):
            return "skinny_nt", gemm_skinny_nt.default_params(M, dtype)
        if dtype in gemm_wmma.DTYPES:  # no spills in any layout or alignment variant
            frag, pad, frags_m = ("m16n16k8", 4, 2) if dtype == "tfloat32" else ("m16n16k16", 8, 4)
            return "wmma", dict(FRAG=frag, WARPS_M=2, WARPS_N=2, FRAGS_M=frags_m, FRAGS_N=2, BK=32, PAD=pad, STAGES=3,
                                SPLIT_K=1, RASTER=1)  # fmt: skip
        if layout == "TN":  # the skinny template reads A transposed; fine for any M, fastest for small M
            return "skinny", dict(VEC=4, TX=32, TY=8, MT=8, KR=4, SPLIT_K=1, PREFETCH=True, MINB=2)
        if layout != "NN":
            raise ValueError(f"no {dtype} template computes layout {layout}; pass row-major operands")
        return "simt", dict(BM=128, BN=128, BK=8, WM=64, WN=32, WNITER=2, TM=8, TN=4, VEC=4, PAD=4, DBUF=True)

    def kernel_name(self, template: str, params: Params, problem: GemmProblem | None = None) -> str:
        template = self.resolve(template, params)
        order = self.templates[template].params
        parts = [f"{k.lower()}{int(params[k]) if isinstance(params[k], bool) else params[k]}" for k in order]
        tag = []
        if problem is not None and template in MODULES:
            v = problem_variant(problem)
            unaligned = "".join(x for x, ok in (("a", v["ALIGN_A"]), ("b", v["ALIGN_B"])) if not ok)
            unaligned = unaligned if getattr(MODULES[template], "ALIGNMENT_VARIANT", False) else ""
            tag = [SHORT[problem.dtype], problem.layout.lower(), *([f"u{unaligned}"] if unaligned else [])]
        return "_".join([self.name, template, *tag, *parts])

    def check_problem(self, template: str, params: Params, problem: GemmProblem) -> str | None:
        """Why this configuration cannot compute this problem (dtype, layout, grid limits), or None."""
        template = self.resolve(template, params)
        info = self.templates[template]
        if problem.dtype not in info.dtypes:
            return f"{template} computes {', '.join(info.dtypes)}, not {problem.dtype}"
        if template in MODULES:
            return MODULES[template].check_problem(params, problem)
        if problem.layout != "NN":
            return f"{template} computes layout NN only, not {problem.layout}"
        rows = self.launch(template, params, problem).grid[1]
        if rows > MAX_GRID_Y:
            return f"needs {rows} row blocks, more than the {MAX_GRID_Y} a grid allows; use a larger BM"
        return None

    def launch(self, template: str, params: Params, problem: GemmProblem) -> Launch:
        """The main kernel's launch; mma packs misaligned operands first (``before``: steps named after it)."""
        template = self.resolve(template, params)
        if template == "mma":
            return gemm_mma.launch(params, problem, self.kernel_name(template, params, problem))
        if template in MODULES:
            return MODULES[template].launch(params, problem)
        if template == "naive":
            bx, by = params["BX"], params["BY"]
            grid = (-(-problem.N // bx), -(-problem.M // by), 1)
            return Launch(grid, (bx * by, 1, 1), 0)
        d = self.derived(template, params)
        grid = (-(-problem.N // params["BN"]), -(-problem.M // params["BM"]), 1)
        return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])

    def scratch(self, template: str, params: Params, problem: GemmProblem) -> tuple[int, int] | None:
        """(partial-sum floats, counters) for templates that take scratch buffers; None for those that don't."""
        template = self.resolve(template, params)
        return MODULES[template].scratch(params, problem) if template in MODULES else None

    def extra_bytes(self, template: str, params: Params, problem: GemmProblem) -> int:
        """Device memory a candidate needs besides A, B, C and split-K scratch: mma's packed operands, else 0."""
        return gemm_mma.extra_bytes(problem) if self.resolve(template, params) == "mma" else 0

    # --- GPU side: inputs, reference, vendor baseline ---------------------------------------------

    def make_inputs(self, problem: GemmProblem, seed: int) -> tuple[Any, Any]:
        """A and B as stored: A is M x K (K x M for a "T" layout), B is K x N (N x K)."""
        import cupy as cp

        rng = cp.random.default_rng(seed)
        a_shape = (problem.K, problem.M) if problem.layout[0] == "T" else (problem.M, problem.K)
        b_shape = (problem.N, problem.K) if problem.layout[1] == "T" else (problem.K, problem.N)
        a = rng.standard_normal(a_shape, dtype=cp.float32)
        b = rng.standard_normal(b_shape, dtype=cp.float32)
        if problem.dtype == "bfloat16":
            return bf16_bits(a), bf16_bits(b)
        dt = cp.dtype(problem.storage)
        return a.astype(dt, copy=False), b.astype(dt, copy=False)

    def operands(self, problem: GemmProblem, inputs: tuple[Any, Any]) -> tuple[Any, Any]:
        """op(A) (M x K) and op(B) (K x N) as views of the stored inputs."""
        a, b = inputs
        return (a.T if problem.layout[0] == "T" else a), (b.T if problem.layout[1] == "T" else b)

    def reference(self, problem: GemmProblem, inputs: tuple[Any, Any]) -> Any:
        import cupy as cp

        a, b = self.operands(problem, inputs)
        return cp.matmul(decode(a, problem.dtype).astype(cp.float64), decode(b, problem.dtype).astype(cp.float64))

    def decode(self, problem: GemmProblem, out: Any) -> Any:
        """The output as numbers (for verification)."""
        return decode(out, problem.dtype)

    def new_output(self, problem: GemmProblem) -> Any:
        import cupy as cp

        return cp.empty((problem.M, problem.N), dtype=problem.storage)

    def new_scratch(self, template: str, params: Params, problem: GemmProblem) -> tuple[Any, ...]:
        """Scratch buffers for templates that take them: split-K partials and tile counters (zeroed), then for
        mma one buffer per packed operand (rows x padded row, A first; the pack steps write all of it)."""
        import cupy as cp

        need = self.scratch(template, params, problem)
        if need is None:
            return ()
        floats, counters = need
        split_k = cp.zeros(max(floats, 1), dtype=cp.float32), cp.zeros(max(counters, 1), dtype=cp.uint32)
        if self.resolve(template, params) == "skinny_wgmma":  # and A's and B's tensor maps, made per operand
            return (*split_k, gemm_skinny_wgmma.TensorMaps(params, problem))
        if self.resolve(template, params) != "mma":
            return split_k
        packs = [
            cp.empty((rows, gemm_mma.packed_ld(cols)), problem.storage) for _, rows, cols in gemm_mma.packed(problem)
        ]
        return (*split_k, *packs)

    def before_args(
        self, template: str, params: Params, problem: GemmProblem, inputs: tuple[Any, Any], scratch: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], ...]:  # fmt: skip
        """Arguments of each step of ``launch(...).before``: mma's pack kernel takes (operand as stored, its
        packed buffer, rows, cols, padded row) once per packed operand; () for every other template."""
        import numpy as np

        if self.resolve(template, params) != "mma":
            return ()
        stored = dict(zip("AB", inputs, strict=True))
        ops = gemm_mma.packed(problem)
        return tuple((stored[name], buf, np.int32(rows), np.int32(cols), np.int32(gemm_mma.packed_ld(cols)))
                     for (name, rows, cols), buf in zip(ops, scratch[2:], strict=True))  # fmt: skip

    def kernel_args(
        self, problem: GemmProblem, inputs: tuple[Any, Any], out: Any, alpha: float = 1.0, beta: float = 0.0,
        scratch: tuple[Any, ...] = (),
    ) -> tuple[Any, ...]:  # fmt: skip
        """(A, B, C, M, N, K, alpha, beta, *scratch). Scratch beyond the two split-K buffers is mma's packed
        operands (see ``new_scratch``): the kernel reads those in place of the misaligned A and/or B; or
        skinny_wgmma's tensor maps, which become the maps of this A and B."""
        import numpy as np

        a, b = inputs
        m, n, k = np.int32(problem.M), np.int32(problem.N), np.int32(problem.K)
        if len(scratch) == 3 and isinstance(scratch[2], gemm_skinny_wgmma.TensorMaps):
            return (a, b, out, m, n, k, np.float32(alpha), np.float32(beta), *scratch[:2], *scratch[2].bind(a, b))
        if len(scratch) > 2:
            packs = dict(zip((name for name, _, _ in gemm_mma.packed(problem)), scratch[2:], strict=True))
            a, b, scratch = packs.get("A", a), packs.get("B", b), scratch[:2]
        return (a, b, out, m, n, k, np.float32(alpha), np.float32(beta), *scratch)

    def vendor(self, problem: GemmProblem, inputs: tuple[Any, Any]) -> tuple[str, Callable[[], Any]] | None:
        """cuBLAS on the same operands: through CuPy, or through torch for bfloat16 (None without torch)."""
        import cupy as cp

        a, b = self.operands(problem, inputs)
        if problem.dtype == "bfloat16":
            try:
                import torch
            except ImportError:
                return None
            ta, tb = (torch.from_dlpack(x).view(torch.bfloat16) for x in inputs)
            ta, tb = (ta.t() if problem.layout[0] == "T" else ta), (tb.t() if problem.layout[1] == "T" else tb)
            tout = torch.empty((problem.M, problem.N), dtype=torch.bfloat16, device=ta.device)
            return "cuBLAS (torch)", lambda: torch.matmul(ta, tb, out=tout)
        out = cp.empty((problem.M, problem.N), dtype=problem.storage)
        name = "cuBLAS fp32" if problem.dtype == "tfloat32" else "cuBLAS"
        return name, lambda: cp.matmul(a, b, out=out)


GEMM = GemmFamily()
