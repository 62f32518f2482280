"""Inference rewrites of a model's graph for the torch drop-in (``autotune.torch.optimize(model, fuse=True)``).

The model is traced with ``torch.fx``; in the traced copy

- each ``BatchNorm2d`` in eval mode that is the only user of a ``Conv2d``'s output is folded into that
  convolution's weight and bias (computed in float64, stored in the convolution's dtype);
- a ReLU after a convolution, or after the sum of a convolution and another tensor (a residual), becomes part
  of the convolution: one :class:`FusedConv2d` module computes ``relu(conv(x) + bias [+ z])``.

A ``FusedConv2d`` is routed like any ``nn.Conv2d``: our kernel computes the convolution without the bias and
``finish`` adds the bias and the residual and applies the ReLU in place, one kernel on the GPU
(``autotune.serve.elementwise``); its own ``forward`` (the vendor route) runs cuDNN's fused
convolution-bias-add-ReLU (``torch.cudnn_convolution_add_relu``) where that is faster than cuDNN's convolution
followed by ``finish`` on the input it sees (raced once per input signature, like the drop-in's own race). The
model passed in is not changed by the rewrite: folded convolutions are new modules, the others are shared.
A model that ``torch.fx`` cannot trace as a whole (a forward of several inputs, control flow on values, as in
most Hugging Face models) has each of its submodules that can be traced rewritten on its own (a Llama MLP, say),
in a shallow copy of the model: the copy's submodule keeps every attribute of the original and runs the rewritten
graph as its forward. Where nothing can be rewritten the model is served unfused; the reason is kept in the
report.
"""

from __future__ import annotations

import copy
import inspect
import logging
import operator
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from .torch_fused import FusedConv2d, MergedLinears, fold_batchnorm, silu_mul

log = logging.getLogger(__name__)

RELU_FUNCTIONS = (torch.relu, torch.relu_, nn.functional.relu)
# ops that take a column slice of a merged Linear's output (a strided view) as they take a dense tensor
STRIDED_OK_FUNCTIONS = (operator.add, operator.mul, operator.sub, torch.add, torch.mul, torch.sub, torch.cat,
                        torch.sigmoid, torch.tanh, torch.relu, nn.functional.relu, nn.functional.silu,
                        nn.functional.gelu)  # fmt: skip
STRIDED_OK_METHODS = ("add", "mul", "sub", "sigmoid", "tanh", "relu", "float", "to", "contiguous")
STRIDED_OK_MODULES = (nn.SiLU, nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid)  # activations called as modules
RELU_METHODS = ("relu", "relu_")
ADD_FUNCTIONS = (operator.add, operator.iadd, torch.add)
ADD_METHODS = ("add", "add_")


@dataclass(frozen=True)
class Fusion:
    """What the rewrite did to a model: BatchNorms folded, convolutions given a ReLU (``relu``) or a residual
    add and a ReLU (``add_relu``); ``skipped`` says why nothing was rewritten ("" when something was, or when
    there was nothing to rewrite)."""

    folded_bn: int = 0
    relu: int = 0
    add_relu: int = 0
    merged_linear: int = 0  # Linears merged into another that reads the same input
    silu_mul: int = 0  # silu(a) * b computed in one pass
    skipped: str = ""
    parts: int = 0  # submodules rewritten on their own (the whole model could not be traced: ``whole``)
    whole: str = ""

    def __str__(self) -> str:
        if self.skipped:
            return f"graph not rewritten: {self.skipped}"
        if not (self.folded_bn or self.relu or self.add_relu or self.merged_linear or self.silu_mul):
            return "graph not rewritten: nothing to fold, fuse or merge"
        where = f"{self.parts} submodules rewritten on their own (the whole model: {self.whole}): " * bool(self.parts)
        return (f"{where}{self.folded_bn} BatchNorm folded, {self.relu} conv+ReLU and {self.add_relu} conv+add+ReLU "
                f"fused, {self.merged_linear} Linear merged into one reading the same input, {self.silu_mul} "
                "silu(a)*b in one pass")  # fmt: skip

    def __add__(self, other: Fusion) -> Fusion:
        return Fusion(self.folded_bn + other.folded_bn, self.relu + other.relu, self.add_relu + other.add_relu,
                      self.merged_linear + other.merged_linear, self.silu_mul + other.silu_mul, "",
                      self.parts + other.parts, self.whole or other.whole)  # fmt: skip


def fuse(model: Any) -> tuple[Any, Fusion]:
    """The model with its BatchNorms folded and ReLUs fused (a ``torch.fx.GraphModule``), or a shallow copy with
    some submodules rewritten (the whole model cannot be traced), or ``model`` itself when there is nothing to
    rewrite; and what was done."""
    if model.training:
        return model, Fusion(skipped="the model is in training mode (fusion is for inference: call .eval())")
    gm, why = _trace(model)
    if gm is None:
        log.info("autotune.torch: %s: %s", type(model).__name__, why)
        return _fuse_parts(model, why)
    return _rewritten(model, gm)


def _trace(model: Any) -> tuple[fx.GraphModule | None, str]:
    """``model`` traced, or None and why it cannot be."""
    if (why := _untraceable_signature(model)) is not None:
        return None, why
    try:
        return fx.GraphModule(model, _Tracer().trace(model), type(model).__name__), ""
    except Exception as exc:  # noqa: BLE001 - any model must still be served: unfused
        return None, f"torch.fx cannot trace it ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"


def _fuse_parts(model: Any, why: str) -> tuple[Any, Fusion]:
    """``model`` (which cannot be traced, ``why``) with each child rewritten on its own where it can be (children
    of children where it cannot): a shallow copy holding the new children, or ``model`` with nothing rewritten."""
    done, new = Fusion(), {}
    for name, child in model.named_children():
        if next(child.children(), None) is None:
            continue  # a module of no modules (a Linear, a norm): nothing to fold, fuse or merge inside
        got, fusion = fuse(child)
        if got is child:
            continue
        new[name] = _standing_in(child, got) if isinstance(got, fx.GraphModule) else got
        done = done + fusion + (Fusion(parts=1) if isinstance(got, fx.GraphModule) else Fusion())
    if not new:
        return model, Fusion(skipped=why)
    shallow = copy.copy(model)
    shallow._modules = {**model._modules, **new}
    return shallow, done + Fusion(whole=why)


def _standing_in(module: nn.Module, gm: fx.GraphModule) -> nn.Module:
    """A shallow copy of ``module`` whose forward is ``gm``'s (its rewritten graph), ``gm`` a submodule of it (so
    that the drop-in finds the new modules); every attribute a caller may read stays as it was."""
    shallow = copy.copy(module)
    shallow._modules = {**module._modules, "autotune_fused": gm}
    shallow.__dict__["forward"] = gm.forward
    return shallow


def _rewritten(model: Any, gm: fx.GraphModule) -> tuple[Any, Fusion]:
    """The passes over ``model``'s trace ``gm``: ``gm`` rewritten, or ``model`` where nothing was."""
    rewrite = _Rewrite(gm)
    folded = rewrite.fold_batchnorms()
    add_relu = rewrite.fuse_add_relus()  # before the plain ReLUs: relu(conv + z) is no ReLU of a convolution
    relu = rewrite.fuse_relus()
    merged = rewrite.merge_linears()
    swiglu = rewrite.fuse_silu_muls()
    if not (folded or relu or add_relu or merged or swiglu):
        return model, Fusion()
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return gm, Fusion(folded, relu, add_relu, merged, swiglu)


def _is_add(node: Any) -> bool:
    """A plain two-tensor sum (no alpha, no out=)."""
    if not isinstance(node, fx.Node) or len(node.args) != 2 or node.kwargs:
        return False
    if node.op == "call_function":
        return node.target in ADD_FUNCTIONS
    return node.op == "call_method" and node.target in ADD_METHODS


def _untraceable_signature(model: Any) -> str | None:
    """Why tracing ``model`` could change what it computes: torch.fx fixes every argument but tensors (a default
    of None traced as a tensor, a flag traced at one value), so only a forward of one tensor is traced."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return "its forward's signature cannot be read"
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) != 1 or params[0].kind not in plain or params[0].default is not inspect.Parameter.empty:
        return "its forward takes more than one input (tracing would fix the others' values)"
    return None


class _Tracer(fx.Tracer):
    """torch.fx's tracer, keeping every Linear, Conv2d and BatchNorm2d (subclasses too) a module call: the
    drop-in routes modules, so a user's subclass must not be traced into its functional ops."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, (nn.Linear, nn.Conv2d, nn.BatchNorm2d)) or super().is_leaf_module(m, qualname)


class _Rewrite:
    """The passes over one traced graph; each returns how many patterns it rewrote."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm, self.graph, self.count = gm, gm.graph, 0
        self.modules = dict(gm.named_modules())
        self.calls = Counter(node.target for node in gm.graph.nodes if node.op == "call_module")

    def conv_of(self, node: Any, fused_ok: bool = True) -> nn.Conv2d | None:
        """The convolution module ``node`` calls, if its output has no other user."""
        if not isinstance(node, fx.Node) or node.op != "call_module" or len(node.users) != 1:
            return None
        m = self.modules.get(node.target)
        if type(m) is FusedConv2d:
            return m if fused_ok and not m.relu and not m.residual else None
        return m if isinstance(m, nn.Conv2d) and type(m).forward is nn.Conv2d.forward else None

    def install(self, target: str, module: nn.Module) -> str:
        """``module`` in the traced model at ``target``'s path, where no module is or the module it replaces is
        called only there (the traced model's containers are its own: the model passed in keeps its modules),
        else under a new name; the name."""
        if self.calls[target] > 1 or (self.calls[target] == 0 and target in self.modules):
            self.count += 1
            target = f"autotune_fused_{self.count}"
        self.calls[target] = 1
        self.gm.add_submodule(target, module)
        self.modules[target] = module
        return target

    def place(self, node: Any, module: nn.Module) -> None:
        """Make ``node`` call ``module``."""
        node.target = self.install(node.target, module)

    def relu_input(self, node: Any) -> Any:
        """The tensor a ReLU node takes (None if ``node`` is no ReLU)."""
        if node.op == "call_module":
            return node.args[0] if isinstance(self.modules.get(node.target), nn.ReLU) and len(node.args) == 1 else None
        if node.op == "call_function" and node.target in RELU_FUNCTIONS and len(node.args) == 1:
            return node.args[0]
        if node.op == "call_method" and node.target in RELU_METHODS and len(node.args) == 1 and not node.kwargs:
            return node.args[0]
        return None

    def fold_batchnorms(self) -> int:
        done = 0
        for node in list(self.graph.nodes):
            bn = self.modules.get(node.target) if node.op == "call_module" else None
            if type(bn) is not nn.BatchNorm2d or bn.training or bn.running_mean is None or len(node.args) != 1:
                continue
            conv_node = node.args[0]
            conv = self.conv_of(conv_node, fused_ok=False)
            if conv is None or conv.training:
                continue
            self.place(conv_node, fold_batchnorm(conv, bn))
            node.replace_all_uses_with(conv_node)
            self.graph.erase_node(node)
            done += 1
        return done

    def fuse_add_relus(self) -> int:
        """relu(conv(x) + z) -> FusedConv2d(residual, relu)(x, z), placed where the add was (z may be computed
        after the convolution)."""
        done = 0
        for node in list(self.graph.nodes):
            add = self.relu_input(node)
            if not (_is_add(add) and len(add.users) == 1):
                continue
            for conv_node, z in ((add.args[0], add.args[1]), (add.args[1], add.args[0])):
                conv = self.conv_of(conv_node)
                if conv is None or not isinstance(z, fx.Node) or z is conv_node:
                    continue  # (z cannot depend on the convolution: the add is its only user)
                fused = FusedConv2d.like(conv)
                fused.relu = fused.residual = True
                name = self.install(conv_node.target, fused)
                with self.graph.inserting_before(add):
                    new = self.graph.call_module(name, (conv_node.args[0], z))
                node.replace_all_uses_with(new)
                self.graph.erase_node(node)
                self.graph.erase_node(add)
                self.graph.erase_node(conv_node)
                done += 1
                break
        return done

    def fuse_relus(self) -> int:
        done = 0
        for node in list(self.graph.nodes):
            conv_node = self.relu_input(node)
            conv = self.conv_of(conv_node)
            if conv is None or len(conv_node.args) != 1 or conv_node.kwargs:
                continue
            fused = FusedConv2d.like(conv)
            fused.relu = True
            self.place(conv_node, fused)
            node.replace_all_uses_with(conv_node)
            self.graph.erase_node(node)
            done += 1
        return done

    def fuse_silu_muls(self) -> int:
        """``F.silu(a) * b`` (or ``b * F.silu(a)``, or ``nn.SiLU``) where the silu has no other user ->
        ``silu_mul(a, b)``."""
        done = 0
        for node in list(self.graph.nodes):
            if not (node.op == "call_function" and node.target in (operator.mul, torch.mul)):
                continue
            if len(node.args) != 2 or node.kwargs:
                continue
            for s, other in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
                a = self.silu_input(s)
                if a is None or len(s.users) != 1 or not isinstance(other, fx.Node):
                    continue
                with self.graph.inserting_before(node):
                    new = self.graph.call_function(silu_mul, (a, other))
                node.replace_all_uses_with(new)
                self.graph.erase_node(node)
                self.graph.erase_node(s)
                done += 1
                break
        return done

    def silu_input(self, node: Any) -> Any:
        """The tensor a SiLU node takes (None if ``node`` is no SiLU, or an in-place one)."""
        if not isinstance(node, fx.Node):
            return None
        if node.op == "call_module" and isinstance(self.modules.get(node.target), nn.SiLU) and len(node.args) == 1:
            return node.args[0]
        if node.op == "call_function" and node.target is nn.functional.silu and len(node.args) == 1:
            return node.args[0] if not node.kwargs.get("inplace", False) else None
        return None

    # --- Linears that read the same input ----------------------------------------------------------------------

    def mergeable(self, node: Any) -> tuple | None:
        """What a Linear call must share with others to be merged with them (None: it cannot be): its input
        node, in_features, dtype, device and whether it has a bias. Its output's every user must take a column
        slice (a strided view) as it takes a dense tensor."""
        m = self.modules.get(node.target) if node.op == "call_module" else None
        if not (isinstance(m, nn.Linear) and type(m).forward is nn.Linear.forward and self.calls[node.target] == 1):
            return None
        if len(node.args) != 1 or node.kwargs or not isinstance(node.args[0], fx.Node) or m.training:
            return None
        if type(m._parameters.get("weight")) is not nn.Parameter or (
            m.bias is not None and "bias" not in m._parameters
        ):
            return None  # a parametrized weight: not re-pointable
        if not all(self.strided_ok(user) for user in node.users):
            return None
        return node.args[0], m.in_features, m.weight.dtype, m.weight.device, m.bias is not None

    def strided_ok(self, user: Any) -> bool:
        if user.op == "call_module":
            m = self.modules.get(user.target)
            if type(m) in STRIDED_OK_MODULES:
                return True
            return isinstance(m, nn.Linear) and type(m).forward is nn.Linear.forward  # routed; torch takes strides
        if user.op == "call_function":
            return user.target in STRIDED_OK_FUNCTIONS
        return user.op == "call_method" and user.target in STRIDED_OK_METHODS

    def merge_linears(self) -> int:
        """Linears that read the same tensor become one ``MergedLinears`` module (the originals' weights become
        views of the concatenated weight: no memory is added). Returns how many Linears were merged into
        another."""
        groups: dict[tuple, list[Any]] = {}
        for node in self.graph.nodes:
            if (key := self.mergeable(node)) is not None:
                groups.setdefault(key, []).append(node)
        merged = 0
        for nodes in groups.values():
            if len(nodes) > 1:
                self._merge(nodes)
                merged += len(nodes) - 1
        return merged

    def _merge(self, nodes: list[Any]) -> None:
        mods = [self.modules[n.target] for n in nodes]
        with torch.no_grad():
            weight = torch.cat([m.weight for m in mods])
            bias = torch.cat([m.bias for m in mods]) if mods[0].bias is not None else None
        merged = nn.Linear(mods[0].in_features, weight.shape[0], bias=bias is not None, device="meta").eval()
        merged.weight = nn.Parameter(weight, requires_grad=False)
        if bias is not None:
            merged.bias = nn.Parameter(bias, requires_grad=False)
        start = 0
        for m in mods:  # the originals read the merged storage from now on: same values, no second copy
            rows = slice(start, start + m.out_features)
            m.weight.data = weight[rows]
            if bias is not None:
                m.bias.data = bias[rows]
            start += m.out_features
        lasts = [n.target.rpartition(".")[2] for n in nodes]
        keys = lasts if len(set(lasts)) == len(lasts) else [str(i) for i in range(len(nodes))]
        group = MergedLinears(merged, dict(zip(keys, mods, strict=True)))
        parent = nodes[0].target.rpartition(".")[0]
        name = self.install(f"{parent}.{'_'.join(lasts)}" if parent else "_".join(lasts), group)
        with self.graph.inserting_before(nodes[0]):
            out = self.graph.call_module(name, (nodes[0].args[0],))
            pieces = [self.graph.call_function(operator.getitem, (out, i)) for i in range(len(nodes))]
        for node, piece in zip(nodes, pieces, strict=True):
            node.replace_all_uses_with(piece)
            self.graph.erase_node(node)
