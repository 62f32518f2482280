"""Forward 2-D convolution (groups 1, dilation 1, zero padding), fp32 accumulation.

    y[n, k, p, q] = sum_{c, r, s} x[n, c, p*stride + r - pad, q*stride + s - pad] * w[k, c, r, s]

Layouts: "NCHW" (x: N,C,H,W; w: K,C,R,S; y: N,K,P,Q) and "NHWC" (x: N,H,W,C; w: K,R,S,C; y: N,P,Q,K).
Dtypes: float32, and float16 (half inputs and output, fp32 accumulation).

The "direct" template (templates/conv/direct.cu.j2) computes a TP x TQ x KB output tile per block; a
thread owns QT outputs along Q (strided by TQ/QT, so neighbouring threads read neighbouring columns) and KT
output channels. Each step stages CB input channels: the input halo and the filter, both as float in
shared memory. Filter size, stride and padding are kernel arguments, not template constants: one source
serves every shape of a dtype and layout, and only the shared-memory size (computed here, guarded in the
kernel) depends on the shape.

The "winograd" template (templates/conv/winograd.cu.j2, described by conv_winograd.py) computes 3x3 stride-1
convolutions as Winograd F(2x2, 3x3) in one fused kernel; check_problem refuses other filters and strides.

Example::

    >>> p = CONV.problem("n1c64h56w56k64r3s3u1p1", "float32")
    >>> CONV.launch("direct", dict(TP=8, TQ=16, KB=64, QT=4, KT=8, CB=8, PAD=1), p).grid
    (28, 1, 1)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import brief
from . import conv_im2col, conv_implicit, conv_implicit_mma, conv_winograd
from .base import Launch, Params, TemplateInfo, auto_info, check_auto

ITEMSIZE = {"float32": 4, "float16": 2}
CTYPE = {"float32": "float", "float16": "__half"}
SHORT = {"float32": "f32", "float16": "f16"}
LAYOUTS = ("NCHW", "NHWC")
FIELDS = ("N", "C", "H", "W", "K", "R", "S", "stride", "pad")
LABEL = re.compile(r"n(\d+)c(\d+)h(\d+)w(\d+)k(\d+)r(\d+)s(\d+)u(\d+)p(\d+)")
MAX_DIM = 2**31 - 1 - 4096  # coordinates are ints in the kernel (offsets are 64-bit)
MAX_TENSOR_BYTES = 2**63 - 1  # element offsets are 64-bit (long long): a tensor's byte offsets must not wrap
MAX_THREADS = 1024
MAX_ACCUMULATORS = 64  # QT * KT floats per thread
MAX_SHARED = 227 * 1024  # opt-in dynamic shared memory per block on sm_90
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
FILTER_PAD = 4  # floats after each KB-wide filter row: keeps 16-byte rows, shifts banks between rows

DIRECT_PARAMS = ("TP", "TQ", "KB", "QT", "KT", "CB", "PAD")
# Templates described by their own module (PARAMS, DTYPES, LAYOUTS, KINDS, DESCRIPTION, alignment, derived,
# check, check_problem, launch); "direct" is described here.
MODULES: dict[str, Any] = {**conv_implicit.TEMPLATES, "implicit_mma": conv_implicit_mma, "winograd": conv_winograd,
                           "im2col_gemm": conv_im2col}  # fmt: skip


@dataclass(frozen=True)
class ConvProblem:
    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: int
    pad: int
    dtype: str
    layout: str = "NCHW"

    @property
    def P(self) -> int:
        return (self.H + 2 * self.pad - self.R) // self.stride + 1

    @property
    def Q(self) -> int:
        return (self.W + 2 * self.pad - self.S) // self.stride + 1

    @property
    def label(self) -> str:
        """e.g. "n32c64h56w56k64r3s3u1p1" (u: stride, p: pad); ``CONV.problem(label, ...)`` parses it back."""
        return "".join(f"{t}{v}" for t, v in zip("nchwkrsup", self.dims, strict=True))

    @property
    def dims(self) -> tuple[int, ...]:
        return (self.N, self.C, self.H, self.W, self.K, self.R, self.S, self.stride, self.pad)

    @property
    def flops(self) -> int:
        return 2 * self.N * self.K * self.P * self.Q * self.C * self.R * self.S

    @property
    def bytes(self) -> int:
        """Fewest bytes a convolution moves: x and w read once, y written once."""
        elems = (
            self.N * self.C * self.H * self.W + self.K * self.C * self.R * self.S + self.N * self.K * self.P * self.Q
        )
        return elems * ITEMSIZE[self.dtype]

    @property
    def device_bytes(self) -> int:
        """Device memory tuning this problem holds at its peak, besides a candidate's own scratch
        (``extra_bytes``): x and w as stored, y twice (the candidate's and the vendor's), and the float64
        reference: float64 copies of x (also padded) and w, and y with one filter tap's product beside it."""
        x, w = self.N * self.C * self.H * self.W, self.K * self.C * self.R * self.S
        y, padded = (
            self.N * self.K * self.P * self.Q,
            self.N * self.C * (self.H + 2 * self.pad) * (self.W + 2 * self.pad),
        )
        return (x + w + 2 * y) * ITEMSIZE[self.dtype] + (x + padded + w + 2 * y) * 8

    @property
    def storage(self) -> str:
        return self.dtype


def variant(dtype: str, layout: str) -> dict[str, Any]:
    """The render-context keys a source depends on besides the parameters (never the shape)."""
    return {"DTYPE": dtype, "T": CTYPE[dtype], "ES": ITEMSIZE[dtype], "LAYOUT": layout}


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class ConvFamily:
    name = "conv2d"
    template_dir = "conv"  # templates/conv/
    shape_help = (
        "a mapping {N, C, H, W, K, R, S, stride, pad} (stride defaults to 1, pad to 0), "
        "a label such as 'n32c64h56w56k64r3s3u1p1' or a list [N, C, H, W, K, R, S, stride, pad]"
    )
    layouts = LAYOUTS
    templates = {
        "direct": TemplateInfo(
            "direct",
            DIRECT_PARAMS,
            ("float32", "float16"),
            "direct convolution: TP x TQ x KB output tile per block, input halo and filter staged in shared memory",
            kinds=(("PAD", "int>=0"),),
        ),
        **{
            n: TemplateInfo(
                n,
                m.PARAMS,
                m.DTYPES,
                m.DESCRIPTION,
                kinds=m.KINDS,
                layouts=m.LAYOUTS,
                optional=tuple(k for k, _ in getattr(m, "DEFAULTS", ())),
                defaults=getattr(m, "DEFAULTS", ()),
            )
            for n, m in MODULES.items()
        },
    }
    # TEMPLATE chooses among every template above (and any registered later in this dict literal).
    templates["auto"] = auto_info(templates, LAYOUTS)

    def problem(self, shape: Any, dtype: str, layout: str = "NCHW") -> ConvProblem:
        if isinstance(shape, str):
            m = LABEL.fullmatch(shape.strip())
            if not m:
                raise ValueError(f"expected {self.shape_help}, got {brief(shape)}")
            dims = [int(g) for g in m.groups()]
        elif isinstance(shape, Mapping):
            unknown = sorted(str(k) for k in shape if k not in FIELDS)
            if unknown:
                raise ValueError(f"unknown convolution key {brief(unknown[0])}; expected keys {', '.join(FIELDS)}")
            missing = [k for k in FIELDS[:7] if k not in shape]
            if missing:
                raise ValueError(f"convolution shape misses {', '.join(missing)}; expected {self.shape_help}")
            dims = [shape[k] for k in FIELDS[:7]] + [shape.get("stride", 1), shape.get("pad", 0)]
        elif isinstance(shape, (list, tuple)):
            if len(shape) != len(FIELDS):
                raise ValueError(
                    f"expected a list of 9 integers [N, C, H, W, K, R, S, stride, pad], got {brief(shape)}"
                )
            dims = list(shape)
        else:
            raise ValueError(f"expected {self.shape_help}, got {brief(shape)}")
        for name, v in zip(FIELDS, dims, strict=True):
            low = 0 if name == "pad" else 1
            if not _int(v) or v < low:
                raise ValueError(f"convolution {name} must be an integer >= {low}, got {brief(v)}")
            if v > MAX_DIM:
                raise ValueError(f"convolution {name} = {brief(v)} is above {MAX_DIM} (32-bit coordinates)")
        n, c, h, w, k, r, s, stride, pad = dims
        if h + 2 * pad > MAX_DIM or w + 2 * pad > MAX_DIM:
            raise ValueError(f"padded input {h + 2 * pad}x{w + 2 * pad} is above {MAX_DIM} (32-bit coordinates)")
        if r > h + 2 * pad or s > w + 2 * pad:
            raise ValueError(f"filter {r}x{s} is larger than the padded input {h + 2 * pad}x{w + 2 * pad}")
        if dtype not in ITEMSIZE:
            raise ValueError(f"unknown conv2d dtype {brief(dtype)}; expected one of {', '.join(ITEMSIZE)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown conv2d layout {brief(layout)}; expected one of {', '.join(LAYOUTS)}")
        p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
        for name, elements in (("x", n * c * h * w), ("w", k * c * r * s), ("y", n * k * p * q)):
            if elements * ITEMSIZE[dtype] > MAX_TENSOR_BYTES:
                raise ValueError(
                    f"{name} would hold {elements:.3g} {dtype} elements, more than 2**63 bytes: the conv2d kernels "
                    "index with int coordinates and 64-bit (long long) offsets, whose byte addresses would wrap "
                    "(templates with int offsets refuse smaller tensors, per configuration)"
                )
        return ConvProblem(*dims, dtype=dtype, layout=layout)

    # --- configuration -> derived values ---------------------------------------------------------

    def resolve(self, template: str, params: Params) -> str:
        """The concrete template a configuration renders: "auto" defers to its TEMPLATE parameter."""
        return str(params.get("TEMPLATE", "")) if template == "auto" else template

    def variant(self, template: str, problem: ConvProblem) -> dict[str, Any]:
        """The render-context keys besides the parameters: dtype, layout and (implicit GEMM) alignment."""
        v = variant(problem.dtype, problem.layout)
        if template in MODULES:
            v.update(MODULES[template].alignment(problem))
        return v

    def derived(self, template: str, params: Params, problem: ConvProblem | None = None) -> dict[str, Any]:
        """Thread layout of a configuration; with a problem also its halo tile and shared memory."""
        template = self.resolve(template, params)
        p = params
        if template in MODULES:
            return MODULES[template].derived(p, self.variant(template, problem) if problem is not None else None)
        tqg, kg = p["TQ"] // p["QT"], p["KB"] // p["KT"]
        d = {"TQG": tqg, "KG": kg, "THREADS": p["TP"] * tqg * kg, "KBS": p["KB"] + FILTER_PAD}
        if problem is not None:
            ht = (p["TP"] - 1) * problem.stride + problem.R  # input rows of TP output rows
            wt = (p["TQ"] - 1) * problem.stride + problem.S
            ws = wt + p["PAD"]
            floats = p["CB"] * problem.R * problem.S * d["KBS"] + p["CB"] * ht * ws
            d.update(HT=ht, WT=wt, WS=ws, SHARED_BYTES=4 * floats)
        return d

    def context(self, template: str, params: Params, problem: ConvProblem) -> dict[str, Any]:
        """Derived values that do not depend on the shape, and the dtype/layout variant."""
        template = self.resolve(template, params)
        if template in MODULES:
            v = self.variant(template, problem)
            if hasattr(MODULES[template], "context"):  # im2col_gemm: the included GEMM's context
                return MODULES[template].context(params, v)
            return {**MODULES[template].derived(params, v), **v}
        return {**self.derived(template, params), **variant(problem.dtype, problem.layout)}

    def check(self, template: str, params: Params) -> str | None:
        """Why this configuration cannot be built, or None. Each reason is a static_assert message."""
        if template not in self.templates:
            return f"unknown conv2d template {template!r}; expected one of {', '.join(self.templates)}"
        if template == "auto":
            reason = check_auto(self.templates, params)
            if reason:
                return reason
            template = self.resolve(template, params)
        if template in MODULES:
            return MODULES[template].check(params)
        p = params
        if p["TQ"] % p["QT"]:
            return "QT must divide TQ"
        if p["KB"] % p["KT"]:
            return "KT must divide KB"
        threads = self.derived(template, p)["THREADS"]
        if threads % 32 or threads > MAX_THREADS:
            return f"TP*(TQ/QT)*(KB/KT) threads must be a whole number of warps, at most {MAX_THREADS}"
        if p["QT"] * p["KT"] > MAX_ACCUMULATORS:
            return f"at most {MAX_ACCUMULATORS} accumulators per thread (QT*KT)"
        return None

    def check_problem(self, template: str, params: Params, problem: ConvProblem) -> str | None:
        """Why this configuration cannot compute this problem (dtype, layout, shared memory, grid), or None."""
        template = self.resolve(template, params)
        if template in MODULES:
            return MODULES[template].check_problem(params, problem)
        info = self.templates[template]
        if problem.dtype not in info.dtypes:
            return f"{template} computes {', '.join(info.dtypes)}, not {problem.dtype}"
        if problem.layout not in LAYOUTS:
            return f"{template} computes layouts {', '.join(LAYOUTS)}, not {problem.layout}"
        smem = self.derived(template, params, problem)["SHARED_BYTES"]
        if smem > MAX_SHARED:
            return (
                f"needs {smem} bytes of shared memory for a {problem.R}x{problem.S} stride-{problem.stride} filter, "
                f"more than {MAX_SHARED}; use a smaller CB, KB or TP x TQ"
            )
        gx, gy, gz = self.launch(template, params, problem).grid
        if gx > MAX_GRID_X:
            return f"needs {gx} spatial tiles, more than grid.x allows; use a larger TP x TQ"
        if gy > MAX_GRID_YZ:
            return f"needs {gy} channel blocks, more than the {MAX_GRID_YZ} grid.y allows; use a larger KB"
        if gz > MAX_GRID_YZ:
            return f"batch N = {gz} is more than the {MAX_GRID_YZ} grid.z allows"
        return None

    def default_config(self, dtype: str, layout: str = "NCHW") -> tuple[str, dict[str, Any]]:
        """The runtime's last resort (256 threads, 32 accumulators; 3x3 filters need 26 KB of shared memory)."""
        if dtype not in ITEMSIZE or layout not in LAYOUTS:
            raise ValueError(f"no conv2d template computes {dtype} {layout}")
        return "direct", dict(TP=8, TQ=16, KB=64, QT=4, KT=8, CB=8, PAD=1)

    def kernel_name(self, template: str, params: Params, problem: ConvProblem | None = None) -> str:
        template = self.resolve(template, params)
        info = self.templates[template]
        parts = [f"{k.lower()}{params[k]}" for k in info.named_params(params)]
        tag = [SHORT[problem.dtype], problem.layout.lower()] if problem is not None else []
        if problem is not None and template in MODULES:  # the alignment variant changes the source
            a = MODULES[template].alignment(problem)
            unaligned = ("a" if problem.layout == "NHWC" and not a.get("ALIGN_A", True) else "") + (
                "" if a.get("ALIGN_B", True) else "b"
            )
            tag += [f"u{unaligned}"] if unaligned else []
        return "_".join([self.name, template, *tag, *parts])

    def launch(self, template: str, params: Params, problem: ConvProblem) -> Launch:
        """direct: grid (spatial tiles, channel blocks, images), one thread per (TQ/QT, TP, KB/KT) slot;
        implicit GEMM: grid (blocks of output pixels, blocks of output channels; implicit_mma: SPLIT_K slices
        of the reduction in z); winograd: (blocks of output 2x2 tiles, blocks of output channels)."""
        template = self.resolve(template, params)
        if template == "im2col_gemm":  # two launches: the im2col step is named after the candidate's kernel
            return conv_im2col.launch(params, problem, self.kernel_name(template, params, problem))
        if template in MODULES:
            return MODULES[template].launch(params, problem)
        d = self.derived(template, params, problem)
        tiles = -(-problem.P // params["TP"]) * -(-problem.Q // params["TQ"])
        grid = (tiles, -(-problem.K // params["KB"]), problem.N)
        return Launch(grid, (d["THREADS"], 1, 1), d["SHARED_BYTES"])

    def scratch(self, template: str, params: Params, problem: ConvProblem) -> tuple[int, int] | None:
        """The scratch a launch takes, from the template module's ``scratch`` when it has one: im2col_gemm's
        (elements of the unrolled matrix, 0), split-K implicit_mma's (floats of the partial tiles, counters);
        None when the kernel takes no scratch."""
        scratch = getattr(MODULES.get(self.resolve(template, params)), "scratch", None)
        return scratch(params, problem) if scratch is not None else None

    def extra_bytes(self, template: str, params: Params, problem: ConvProblem) -> int:
        """Device memory a candidate needs besides x, w and y: im2col_gemm's unrolled matrix, split-K partial
        tiles and counters, else 0."""
        template = self.resolve(template, params)
        if template == "im2col_gemm":
            return conv_im2col.extra_bytes(problem)
        need = self.scratch(template, params, problem)
        return 4 * (need[0] + need[1]) if need is not None else 0

    # --- GPU side: inputs, reference, vendor baseline ---------------------------------------------

    def shapes(self, problem: ConvProblem) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Array shapes of x, w and y as stored in the problem's layout."""
        p = problem
        if p.layout == "NHWC":
            return (p.N, p.H, p.W, p.C), (p.K, p.R, p.S, p.C), (p.N, p.P, p.Q, p.K)
        return (p.N, p.C, p.H, p.W), (p.K, p.C, p.R, p.S), (p.N, p.K, p.P, p.Q)

    def make_inputs(self, problem: ConvProblem, seed: int) -> tuple[Any, Any]:
        """Fresh standard-normal x and w in the storage dtype and layout."""
        import cupy as cp

        rng = cp.random.default_rng(seed)
        xs, ws, _ = self.shapes(problem)
        dt = cp.dtype(problem.storage)
        x = rng.standard_normal(xs, dtype=cp.float32).astype(dt, copy=False)
        w = rng.standard_normal(ws, dtype=cp.float32).astype(dt, copy=False)
        return x, w

    def reference(self, problem: ConvProblem, inputs: tuple[Any, Any]) -> Any:
        """float64 on the GPU: one (K x C) @ (C x N*P*Q) product per filter tap over a strided input view."""
        import cupy as cp

        p = problem
        x, w = (a.astype(cp.float64) for a in inputs)
        if p.layout == "NHWC":
            x, w = x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2)
        xp = cp.pad(x, ((0, 0), (0, 0), (p.pad, p.pad), (p.pad, p.pad)))
        y = cp.zeros((p.K, p.N, p.P, p.Q), dtype=cp.float64)
        hi, wi = p.stride * (p.P - 1) + 1, p.stride * (p.Q - 1) + 1
        for r in range(p.R):
            for s in range(p.S):
                window = xp[:, :, r : r + hi : p.stride, s : s + wi : p.stride]  # N, C, P, Q
                y += cp.tensordot(w[:, :, r, s], window, axes=([1], [1]))
        return y.transpose(1, 2, 3, 0) if p.layout == "NHWC" else y.transpose(1, 0, 2, 3)

    def decode(self, problem: ConvProblem, out: Any) -> Any:
        return out

    def new_output(self, problem: ConvProblem) -> Any:
        import cupy as cp

        return cp.empty(self.shapes(problem)[2], dtype=problem.storage)

    def new_scratch(self, template: str, params: Params, problem: ConvProblem) -> tuple[Any, ...]:
        """im2col_gemm: an ``Im2colScratch`` (the unrolled matrix, the GEMM's scratch); a template with split-K
        scratch: zeroed (float32 partials, uint32 counters); () for a kernel that takes none."""
        if self.resolve(template, params) == "im2col_gemm":
            return conv_im2col.new_scratch(params, problem)
        need = self.scratch(template, params, problem)
        if need is None:
            return ()
        import cupy as cp

        floats, counters = need
        return cp.zeros(max(floats, 1), dtype=cp.float32), cp.zeros(max(counters, 1), dtype=cp.uint32)

    def before_args(
        self, template: str, params: Params, problem: ConvProblem, inputs: tuple[Any, Any], scratch: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], ...]:  # fmt: skip
        """Arguments of each step of ``launch(...).before``: im2col_gemm's im2col kernel takes (x, col) and the
        nine shape integers plus P and Q."""
        import numpy as np

        if self.resolve(template, params) != "im2col_gemm":
            return ()
        return ((inputs[0], scratch[0], *(np.int32(v) for v in (*problem.dims, problem.P, problem.Q))),)

    def kernel_args(
        self, problem: ConvProblem, inputs: tuple[Any, Any], out: Any, alpha: float = 1.0, beta: float = 0.0,
        scratch: tuple[Any, ...] = (),
    ) -> tuple[Any, ...]:  # fmt: skip
        """x, w, y and the nine shape integers plus P and Q, then the scratch buffers (``new_scratch``) if any:
        split-K implicit_mma's (partial, counters). y is overwritten: alpha must be 1 and beta 0.

        For im2col_gemm's scratch (an ``Im2colScratch``: the unrolled matrix, then the GEMM's own buffers), the
        GEMM's arguments instead: A = the unrolled matrix, B = w, C = y, M = N*P*Q, N = K, K = R*S*C, alpha 1,
        beta 0, then the GEMM's buffers."""
        import numpy as np

        if alpha != 1.0 or beta != 0.0:
            raise ValueError(f"conv2d computes y = conv(x, w) only (alpha 1, beta 0), got alpha={alpha}, beta={beta}")
        x, w = inputs
        if isinstance(scratch, conv_im2col.Im2colScratch):
            p = problem
            mnk = (np.int32(p.N * p.P * p.Q), np.int32(p.K), np.int32(p.R * p.S * p.C))
            return (scratch.col, w, out, *mnk, np.float32(1.0), np.float32(0.0), *scratch.gemm)
        return (x, w, out, *(np.int32(v) for v in (*problem.dims, problem.P, problem.Q)), *scratch)

    def vendor(self, problem: ConvProblem, inputs: tuple[Any, Any]) -> tuple[str, Callable[[], Any]] | None:
        """cuDNN through torch (benchmark mode, no TF32 for float32), on the same arrays; None without torch."""
        try:
            import torch
        except ImportError:
            return None
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False  # our float32 kernel computes in full fp32
        tx, tw = (torch.from_dlpack(a) for a in inputs)
        if problem.layout == "NHWC":  # logical NCHW views with channels_last strides
            tx, tw = tx.permute(0, 3, 1, 2), tw.permute(0, 3, 1, 2)
        conv = torch.nn.functional.conv2d
        return "cuDNN (torch)", lambda: conv(tx, tw, stride=problem.stride, padding=problem.pad)


CONV = ConvFamily()
