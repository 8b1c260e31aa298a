"""What the parts of SoftDict's façade share: one store, one encoder, one lock.

``SoftDict`` (``softdict._mapping``) is put together from one class per concern, each built on
``Facade``: its options as properties (``_option_properties``), soft lookups (``_soft_lookup``),
calibrate and fit (``_tuning``), and saving and loading (``_saving``); the exact mapping, copies
and inserts are ``_mapping``'s own. Each part holds no state of its own.

Thread safety: one lock guards the store. Every read and every change holds it, so a lookup sees
the store before or after a write, never half of one. Encoding text, the slow part, happens
outside the lock, so threads encode in parallel and only the search and the commit are
serialised.
"""

from __future__ import annotations

import threading
from typing import TypeVar

import numpy as np

from softdict.encoders import TextEncoder
from softdict.store import Store

__all__ = ["Facade"]

F = TypeVar("F", bound="Facade")


class Facade:
    """The store, the encoder and the lock every part of ``SoftDict`` works through."""

    _store: Store
    _encoder: TextEncoder
    _lock: threading.RLock

    def _attach(self, store: Store, encoder: TextEncoder) -> None:
        self._store = store
        self._encoder = encoder
        self._lock = threading.RLock()

    @classmethod
    def _from_store(cls: type[F], store: Store, encoder: TextEncoder) -> F:
        """An instance over an existing store (what ``load`` and ``copy`` give back)."""
        made = cls.__new__(cls)
        made._attach(store, encoder)
        return made

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encoder.encode_queries(texts, batch_size=self._store.config.batch_size)
