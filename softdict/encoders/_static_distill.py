"""Distil a sentence-transformers model folder into a model2vec static model.

Run by ``softdict.encoders.static`` in a child process, so that torch, transformers and the
distiller are imported there and not in the process that looks up:

    python -m softdict.encoders._static_distill MODEL_DIR PCA_DIMS OUT_DIR

``distill`` passes every token of the model's vocabulary through the model once (about 30,000
tokens), keeps the output embeddings as a table, reduces them with PCA to ``PCA_DIMS`` (0: no
PCA) and weighs each token by its frequency (SIF). Nothing is downloaded: the model and its
tokenizer come from ``MODEL_DIR``.
"""

from __future__ import annotations

import os
import sys


def distill(model_dir: str, pca_dims: int, out: str) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"  # a local folder; never ask the hub
    from model2vec.distill import distill as model2vec_distill

    model = model2vec_distill(model_name=model_dir, pca_dims=pca_dims or None, device="cpu")
    model.save_pretrained(out)


if __name__ == "__main__":
    import logging
    import warnings

    warnings.simplefilter("ignore")  # transformers' notes on unused weights are not for the user
    logging.disable(logging.WARNING)
    os.environ.setdefault("TQDM_DISABLE", "1")
    distill(sys.argv[1], int(sys.argv[2]), sys.argv[3])
