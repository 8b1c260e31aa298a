"""Export a sentence-transformers model folder (Transformer, mean Pooling, Normalize) to ONNX,
and quantise an export to int8.

Run by ``softdict.encoders.onnx`` in a child process, so that torch and the quantiser are
imported there and not in the process that looks up:

- ``python -m softdict.encoders._onnx_export MODEL_DIR OUT``: the float32 export. The graph
  takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` (batch x tokens, int64) and
  returns ``embedding`` (batch x dim): the mean of the token states under the attention mask,
  unit-normalised, as sentence-transformers computes it.
- ``python -m softdict.encoders._onnx_export --int8 FLOAT32_ONNX OUT``: that export with its
  weights quantised to int8 and its activations quantised at run time (ONNX Runtime's dynamic
  quantisation).
"""

from __future__ import annotations

import sys
from typing import Any


def export(model_dir: str, out: str) -> None:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()

    class Embedding(torch.nn.Module):
        def __init__(self, transformer: Any) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            states = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            # sentence-transformers' Pooling (mean tokens) and Normalize modules.
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    example = torch.ones(2, 8, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "tokens"} for name in names}
    with torch.no_grad():
        torch.onnx.export(
            Embedding(model),
            (example, example, torch.zeros_like(example)),
            out,
            input_names=names,
            output_names=["embedding"],
            dynamic_axes={**axes, "embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,  # the TorchScript exporter: no onnxscript needed
        )


def quantize(float32_model: str, out: str) -> None:
    # Per output channel: one scale per weight column kept the embeddings at cosine 0.992 to
    # float32 on pycountry names, against 0.960 with one scale per matrix, at the same speed.
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(float32_model, out, weight_type=QuantType.QInt8, per_channel=True)


if __name__ == "__main__":
    import logging
    import warnings

    warnings.simplefilter("ignore")  # the exporter's notes on indexing are not for the user
    logging.disable(logging.WARNING)  # nor the quantiser's advice to pre-process the graph
    if sys.argv[1] == "--int8":
        quantize(sys.argv[2], sys.argv[3])
    else:
        export(sys.argv[1], sys.argv[2])
