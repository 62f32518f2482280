"""Other models for ``models.py --zoo``: what a user brings, not what was tuned. Random weights, built offline
(torchvision constructors and Hugging Face ``transformers`` configs; nothing is downloaded).

Each entry builds a model whose forward takes one tensor and returns one tensor, and makes that input:

- torchvision classifiers on 224 x 224 images: MobileNetV3 (depthwise and grouped convolutions, hardswish),
  EfficientNet-B0 (SiLU, squeeze-excitation), ConvNeXt-T (7 x 7 depthwise, LayerNorm, Linear on channels-last
  activations), ViT-B/16 (Linear on [batch, tokens, 768], attention through F.multi_head_attention_forward);
- ``transformers``: a 4-layer BERT-base encoder (Linear with bias, GELU) on 128 tokens, and a 2-layer Llama with
  hidden size 2048 (grouped-query attention, SwiGLU) on 32 tokens; the wrapper returns the last hidden state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Entry:
    name: str
    source: str  # "torchvision" | "transformers"
    classifier: bool  # top-1 agreement is reported


ENTRIES = {e.name: e for e in (
    Entry("mobilenet_v3_large", "torchvision", True),
    Entry("efficientnet_b0", "torchvision", True),
    Entry("convnext_tiny", "torchvision", True),
    Entry("vit_b_16", "torchvision", True),
    Entry("bert4", "transformers", False),
    Entry("llama2l", "transformers", False),
)}  # fmt: skip
TOKENS = {"bert4": 128, "llama2l": 32}


def build(torch: Any, name: str) -> Any:
    """The model ``name`` (an ``ENTRIES`` key) on the current device, in eval mode, random weights."""
    entry = ENTRIES[name]
    if entry.source == "torchvision":
        import torchvision

        return getattr(torchvision.models, name)(weights=None).eval()
    return _LastHidden(torch, _transformer(name)).eval()


def make_input(torch: Any, name: str, batch: int, generator: Any) -> Any:
    """The input of ``name`` for ``batch`` samples: float64 images, or token ids (int64)."""
    if ENTRIES[name].source == "torchvision":
        return torch.randn((batch, 3, 224, 224), device="cuda", dtype=torch.float64, generator=generator)
    vocab = 30522 if name == "bert4" else 32000
    return torch.randint(0, vocab, (batch, TOKENS[name]), device="cuda", generator=generator)


def _transformer(name: str) -> Any:
    import transformers

    if name == "bert4":
        return transformers.BertModel(transformers.BertConfig(num_hidden_layers=4), add_pooling_layer=False)
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                                      num_attention_heads=16, num_key_value_heads=4)  # fmt: skip
    return transformers.LlamaModel(config)


def _LastHidden(torch: Any, model: Any) -> Any:  # noqa: N802 - builds a module, as a class would
    class LastHidden(torch.nn.Module):
        """``model(ids).last_hidden_state``: one tensor in, one out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: Any) -> Any:
            return self.model(ids).last_hidden_state

    return LastHidden()
