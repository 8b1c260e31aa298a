"""``TextEncoder``: one encoder as a store uses it. Batching, a progress bar for large inserts,
checked output, and a bounded cache of query embeddings, whatever the encoder behind it."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from softdict._arguments import embedding_array
from softdict._errors import EncoderError, InvalidValueError, ValueShapeError
from softdict.encoders.base import PROBE_TEXT, Encoder, EncoderIdentity

__all__ = ["TextEncoder"]

# Without progress=, a bar is drawn only for inserts of at least this many keys, on a terminal.
_PROGRESS_MIN_KEYS = 2_000


class TextEncoder:
    """An ``Encoder`` with softdict's batching, checks and query cache.

    Keys are encoded as documents and queries as queries, through the encoder's
    ``encode_document``/``encode_query`` where it has them, else through ``encode``.

    Args:
        encoder: the ``Encoder`` (e.g. a ``SentenceTransformerEncoder``).
        name: how stores record it.
        query_cache_size: query embeddings kept (LRU); 0 turns the cache off.
        loadable_by_name: whether ``name`` alone loads this encoder again (saved stores record it).
    """

    def __init__(
        self,
        encoder: Encoder,
        name: str,
        query_cache_size: int = 1024,
        *,
        loadable_by_name: bool = False,
    ) -> None:
        self.encoder = encoder
        self.name = name
        self.loadable_by_name = loadable_by_name
        self.dim: int | None = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = query_cache_size
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TextEncoder({self.name!r}, dim={self.dim})"

    def _call(self, texts: list[str], role: str, batch_size: int, progress: bool) -> np.ndarray:
        """Encode in chunks of ``batch_size``, so no encoder is handed more texts at once; with
        ``progress``, a tqdm bar counts the keys.

        Texts go to the encoder longest first and come back in their own order, as
        sentence-transformers sorts them: a batch is padded to its longest text, so texts of
        like length batch with little padding."""
        bar: Any = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc="softdict: embedding keys", unit="key")
        order = np.argsort([-len(text) for text in texts], kind="stable")
        ordered = [texts[i] for i in order]
        chunks = []
        try:
            for start in range(0, len(ordered), batch_size):
                chunks.append(self._call_once(ordered[start : start + batch_size], role))
                if bar is not None:
                    bar.update(len(chunks[-1]))
        finally:
            if bar is not None:
                bar.close()
        embeddings = np.empty((len(texts), chunks[0].shape[1]), dtype=np.float32)
        embeddings[order] = np.concatenate(chunks)
        return embeddings

    def _call_once(self, texts: list[str], role: str) -> np.ndarray:
        entry = getattr(self.encoder, f"encode_{role}", None)
        try:
            raw = entry(texts) if callable(entry) else self.encoder.encode(texts)
        except Exception as exc:
            raise EncoderError(
                f"encoder {self.name!r} failed on {len(texts)} text(s) ({described(exc)})"
            ) from exc
        return self._checked(raw, len(texts))

    def _checked(self, raw: Any, n_texts: int) -> np.ndarray:
        # The check of embeddings given directly: text, a ragged list, and what float32 would
        # take without a word but is no embedding (complex numbers, durations, times).
        what = f"the embeddings of encoder {self.name!r}"
        try:
            embeddings = embedding_array(raw, what)
        except ValueShapeError as exc:
            raise EncoderError(f"{exc}; .encode(list[str]) must return such an array") from None
        except InvalidValueError:  # an int no float holds (10**400)
            raise EncoderError(
                f"{what} contain a number beyond float32 range; check the model and its input"
            ) from None
        except Exception as exc:  # an object that will not be an array: a tensor that needs grad
            raise EncoderError(
                f"{what} cannot be read as an array ({described(exc)}); .encode(list[str]) must "
                f"return an (n, d) array of numbers"
            ) from exc
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
        self, texts: list[str], *, batch_size: int = 64, progress: bool | None = False
    ) -> np.ndarray:
        """Embed keys (documents), float32 (n, d), in batches of ``batch_size``.

        ``progress``: True draws a tqdm bar counting the batches; None draws one only for
        inserts of 2,000 keys or more when stderr is a terminal.
        """
        if not texts:
            return self._empty()
        if progress is None:
            progress = len(texts) >= _PROGRESS_MIN_KEYS and sys.stderr.isatty()
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
            fresh = self._call(missing, "query", batch_size, progress=False)
            rows.update(zip(missing, fresh))
            if self._cache_size:
                with self._cache_lock:
                    for text, row in zip(missing, fresh):
                        # A copy, so a cached row does not keep its whole batch array alive.
                        self._cache[text] = row.copy()
                        self._cache.move_to_end(text)
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        if not texts:
            return self._empty()
        return np.stack([rows[text] for text in texts])

    def _empty(self) -> np.ndarray:
        """(0, d) float32: an empty batch has the encoder's dimension too, which an encoder
        object states nowhere but in its output; the first empty batch embeds one text for it."""
        if self.dim is None:
            self._call_once([PROBE_TEXT], "document")  # sets self.dim
        return np.zeros((0, self.dim or 0), dtype=np.float32)

    def identity(self) -> EncoderIdentity:
        """Name, dimension and fingerprint, as a saved store records them."""
        fingerprint = self.encode_keys([PROBE_TEXT])[0]
        return EncoderIdentity(
            name=self.name,
            dim=int(fingerprint.shape[0]),
            loadable_by_name=self.loadable_by_name,
            probe_text=PROBE_TEXT,
            fingerprint=tuple(float(x) for x in fingerprint),
        )


def described(exc: BaseException) -> str:
    """An exception as "Type: message", or its type alone where its message cannot be read (a
    ``__str__`` that raises would otherwise escape in place of the error that reports it)."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return type(exc).__name__
