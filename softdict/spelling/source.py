"""``SpellingSource``: what a lookup asks of a store's spelling channel. ``SpellingIndex`` holds
the keys' forms in this process (the memory store, a small Milvus store); a large Milvus store
answers from Milvus (``softdict.store.milvus._spelling``)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from softdict.index.base import Allow
from softdict.spelling.bounded import BoundedBatch
from softdict.spelling.terms import QueryTerms
from softdict.spelling.text import SpellingQueries

__all__ = ["SpellingSource"]


class SpellingSource(Protocol):
    """The spelling channel's answers about a store's keys (``SpellingIndex`` documents each)."""

    def similarity(self, queries: SpellingQueries, ids: np.ndarray) -> np.ndarray: ...

    def marks(self, queries: SpellingQueries, ids: np.ndarray) -> np.ndarray: ...

    def spelling_of(
        self, queries: SpellingQueries, ids: np.ndarray, terms: QueryTerms
    ) -> tuple[np.ndarray, np.ndarray | None]: ...

    def bounded_scores(
        self,
        queries: SpellingQueries,
        ids: np.ndarray,
        meaning: np.ndarray,
        terms: QueryTerms,
        temperature: float,
        keep: int = 1,
    ) -> BoundedBatch: ...

    def candidates(
        self,
        queries: SpellingQueries,
        n: int,
        allow: Allow | None,
        terms: QueryTerms | None = None,
    ) -> tuple[np.ndarray, np.ndarray]: ...
