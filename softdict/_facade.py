"""What the parts of SoftDict's façade share: one store, one encoder, one lock.

``SoftDict`` (``softdict._mapping``) is put together from one class per concern, each built on
``Facade``: its options as properties (``_option_properties``), soft lookups (``_soft_lookup``),
calibrate and fit (``_tuning``), saving and loading (``_saving``), and copies and pickling
(``_copies``); the exact mapping, the dict operators and inserts are ``_mapping``'s own. Each
part holds no state of its own.

Thread safety: one lock guards the store. Every read and every change holds it, so a lookup sees
the store before or after a write, never half of one. Encoding text, the slow part, happens
outside the lock, so threads encode in parallel and only the search and the commit are
serialised.
"""

from __future__ import annotations

import copy
import threading
from typing import TypeVar

import numpy as np

from softdict._errors import EncoderError
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

    def _copied(self: F, memo: dict[int, object] | None = None) -> F:
        """An instance over a copy of the store, sharing the encoder, with the attributes a
        subclass or its user set on this one (deep copies of them, given ``memo``): ``copy``,
        ``copy.copy`` and ``copy.deepcopy`` dropped them without a word."""
        with self._lock:
            made = type(self)._from_store(self._store.copy(), self._encoder)
            attributes = self._attributes()
        if memo is not None:
            memo[id(self)] = made  # an attribute that refers back to this store gets the copy
            memo[id(self._encoder)] = self._encoder  # shared, as the copy's own encoder is
            attributes = copy.deepcopy(attributes, memo)
        made.__dict__.update(attributes)
        return made

    def _attributes(self) -> dict[str, object]:
        """What was set on this instance besides its store, encoder, lock and constructor's
        note: what a copy or a pickle carries over as it is."""
        own = ("_store", "_encoder", "_lock", "_named_options")
        return {name: value for name, value in vars(self).items() if name not in own}

    def _pickled_attributes(self) -> dict[str, object]:
        """``_attributes`` for a pickle, which carries the encoder's name only: one that holds
        the encoder itself is refused (pickle failed on its lock, or would carry weights)."""
        attributes = self._attributes()
        for name, value in attributes.items():
            if value is self._encoder:
                raise EncoderError(
                    f"cannot pickle this {type(self).__name__}: its attribute {name!r} holds the "
                    f"encoder, whose weights a pickle never carries; drop it before pickling "
                    f"(the store's own encoder, sd.encoder, is restored by name)"
                )
        return attributes

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encoder.encode_queries(texts, batch_size=self._store.config.batch_size)
