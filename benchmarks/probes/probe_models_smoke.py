"""Models outside the benchmark's zoo through the PyTorch drop-in, before any tuning: does anything raise, does the
output match torch's, and how do eager and CUDA-graph times compare. Random weights, built offline (torchvision
constructors, transformers configs); nothing is downloaded.

    PYTHONPATH=$PWD python3 benchmarks/probes/probe_models_smoke.py                   # every model below
    PYTHONPATH=$PWD python3 benchmarks/probes/probe_models_smoke.py --only resnet18 gpt2-2l

A row a model: the error of ours against torch's own output (same dtype; not against float64), eager and graph
ms for torch and ours (median of 5 interleaved loops of about 30 ms), and the drop-in's report (calls by route,
fallbacks by reason, what the graph rewrite did). A model whose own forward cannot be captured in a CUDA graph
says so (some transformers models copy from the host inside their forward). A model that raises prints its
traceback and the probe goes on.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # models.py: the timing loops and graph capture


def torchvision_model(name: str, **kw: Any) -> Callable[[], Any]:
    def make() -> Any:
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kw)

    return make


def transformers_model(kind: str) -> Callable[[], Any]:
    """A 2-layer model from a transformers config, wrapped to take token ids and return the last hidden state."""

    def make() -> Any:
        import torch
        import transformers as tf

        model = {
            "gpt2": lambda: tf.GPT2Model(tf.GPT2Config(n_layer=2)),
            "t5enc": lambda: tf.T5EncoderModel(tf.T5Config(num_layers=2, d_model=512, d_ff=2048, num_heads=8)),
            "distilbert": lambda: tf.DistilBertModel(tf.DistilBertConfig(n_layers=2)),
            "mistral": lambda: tf.MistralModel(
                tf.MistralConfig(
                    hidden_size=1024,
                    intermediate_size=3584,
                    num_hidden_layers=2,
                    num_attention_heads=8,
                    num_key_value_heads=2,
                )
            ),  # fmt: skip
        }[kind]()

        class LastHidden(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, ids: Any) -> Any:
                return self.model(input_ids=ids).last_hidden_state

        return LastHidden()

    return make


# name, builder, dtype, channels-last, batch, input: "image" (224 x 224) or a token count
CASES = (
    ("resnet18", torchvision_model("resnet18"), "float16", True, 16, "image"),
    ("densenet121", torchvision_model("densenet121"), "float32", False, 2, "image"),
    ("regnet_y_400mf", torchvision_model("regnet_y_400mf"), "float16", False, 8, "image"),
    ("swin_t", torchvision_model("swin_t"), "float16", False, 4, "image"),
    ("googlenet", torchvision_model("googlenet", aux_logits=False, init_weights=True), "float32", False, 4, "image"),
    ("vgg11", torchvision_model("vgg11"), "float16", False, 4, "image"),
    ("resnext50_32x4d", torchvision_model("resnext50_32x4d"), "bfloat16", True, 8, "image"),
    ("squeezenet1_1", torchvision_model("squeezenet1_1"), "float32", False, 8, "image"),
    ("maxvit_t", torchvision_model("maxvit_t"), "float16", False, 2, "image"),
    ("gpt2-2l", transformers_model("gpt2"), "float16", False, 4, 64),
    ("t5enc-2l", transformers_model("t5enc"), "float32", False, 2, 128),
    ("distilbert-2l", transformers_model("distilbert"), "bfloat16", False, 8, 128),
    ("mistral-2l", transformers_model("mistral"), "bfloat16", False, 1, 17),
)


def rel_error(out: Any, ref: Any) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def run_case(case: tuple) -> str:
    import torch
    from models import capture, time_loops

    import autotune.torch as at

    name, make, dtype, channels_last, batch, inp = case
    torch.manual_seed(0)
    with torch.device("cuda"):
        base = make().eval()
    dt, fmt = getattr(torch, dtype), torch.channels_last if channels_last else torch.contiguous_format
    base = base.to(dtype=dt, memory_format=fmt)
    if inp == "image":
        x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dt).to(memory_format=fmt)
    else:
        x = torch.randint(0, 30000, (batch, inp), device="cuda")
    with torch.inference_mode():
        ref = base(x)
        opt = at.optimize(copy.deepcopy(base))
        err = rel_error(opt(x), ref)
        graph = "graph " + "{:.3f}/{:.3f} ms x{:.2f}"
        try:
            ours_graph, out = capture(torch, lambda: opt(x))
            torch_graph, _ = capture(torch, lambda: base(x))
            ours_graph.replay()
            graph_err = rel_error(out, ref)
            g = time_loops(torch, [torch_graph.replay, ours_graph.replay], 5, 30.0)
            graph = graph.format(g[0], g[1], g[0] / g[1]) + f" (error {graph_err:.1e})"
        except Exception as exc:  # noqa: BLE001 - the probe reports it and goes on
            graph = f"graph not captured: {type(exc).__name__}: {str(exc)[:120]}"
        e = time_loops(torch, [lambda: base(x), lambda: opt(x)], 5, 30.0)
    report = " / ".join(line.strip() for line in str(at.report(opt)).splitlines()[:3])
    return (f"{name:16} {dtype:8} b{batch:<3} error {err:.1e}  eager {e[0]:.3f}/{e[1]:.3f} ms x{e[0] / e[1]:.2f}  "
            f"{graph}  | {report}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="NAME", help=f"models to run, of: {', '.join(c[0] for c in CASES)}")
    args = ap.parse_args()
    unknown = set(args.only or ()) - {c[0] for c in CASES}
    if unknown:
        print(f"unknown model {', '.join(sorted(unknown))}; the models are {', '.join(c[0] for c in CASES)}")
        return 2
    failed = 0
    for case in CASES:
        if args.only and case[0] not in args.only:
            continue
        start = time.perf_counter()
        try:
            print(f"OK   {run_case(case)}  ({time.perf_counter() - start:.0f} s)", flush=True)
        except Exception as exc:  # noqa: BLE001 - a model that raises is the finding: print it, go on
            failed += 1
            print(f"FAIL {case[0]}: {type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc(limit=8)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
