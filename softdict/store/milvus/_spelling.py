"""The spelling channel of a large Milvus store, served by Milvus: this process holds no key.

Candidates come from a search of the keys' 3-gram field (``_grams``): each query's
``CANDIDATE_POOL`` best keys by shared 3-grams, and for a short one-word query the keys of its
first letter and about its length, come back with their texts in one request, and are scored
exactly here (``SpellingIndex.best_of_pools``), as the memory store scores its pool. Spelling
similarities and marks of other keys (the dense search's, a sampled tail's) are scored from
their texts, fetched by id.

Texts are cached by id, up to ``TEXTS_CACHED`` of them (the most recently used): a key's id is
a hash of its text (``_ids``), so an id never names another text, and a cached text is never
stale (a deleted key's id is simply no longer found by searches).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from softdict.index.base import Allow, sorted_unique
from softdict.spelling.bounded import BoundedBatch
from softdict.spelling.combination import QueryTerms
from softdict.spelling.index import CANDIDATE_POOL, SpellingIndex, no_candidates
from softdict.spelling.text import SpellingQueries
from softdict.store.milvus._collection import KeyRows
from softdict.store.milvus._grams import neighbour_vector, query_vector
from softdict.store.milvus.backend import changed_during_lookup

__all__ = ["TEXTS_CACHED", "KeyTexts", "MilvusSpelling"]

# Texts kept by id in a process (about 100 bytes each for short keys: ~13 MB). A lookup asks for
# a few thousand at most (a candidate pool, the dense head, a sampled tail).
TEXTS_CACHED = 1 << 17


class KeyTexts:
    """Keys' texts by id: the most recently used ``limit`` of them (see the module docstring)."""

    def __init__(self, rows: Callable[[], KeyRows | None], limit: int = TEXTS_CACHED) -> None:
        self._rows = rows
        self._limit = limit
        self._texts: OrderedDict[int, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._texts)

    def remember(self, found: list[tuple[int, str]]) -> None:
        for id_, text in found:
            self._texts[id_] = text
            self._texts.move_to_end(id_)
        while len(self._texts) > self._limit:
            self._texts.popitem(last=False)

    def of(self, ids: np.ndarray) -> list[str]:
        """The texts of ``ids`` (held keys), fetching those not cached in one request; a key
        deleted since its id was found is an error (``changed_during_lookup``)."""
        wanted = [int(i) for i in ids]
        missing = [i for i in dict.fromkeys(wanted) if i not in self._texts]
        if missing:
            rows = self._rows()
            found = [] if rows is None else rows.get(np.array(missing, np.int64), ["key"])
            if len(found) < len(missing):
                raise changed_during_lookup()
            fetched = {row["id"]: row["key"] for row in found}
            texts = [self._texts.get(i) or fetched[i] for i in wanted]
            self.remember(list(fetched.items()))
            return texts
        self.remember([(i, self._texts[i]) for i in dict.fromkeys(wanted)])
        return [self._texts[i] for i in wanted]


class MilvusSpelling:
    """``SpellingIndex``'s lookup methods over a Milvus store's keys (see the module docstring).

    Args:
        rows: the store's key collection (with its 3-gram field).
        texts: the process's cache of key texts.
        expression: the Milvus filter that admits the keys an ``Allow`` allows.
    """

    def __init__(
        self, rows: KeyRows, texts: KeyTexts, expression: Callable[[Allow | None], str]
    ) -> None:
        self._rows = rows
        self._texts = texts
        self._expression = expression

    def _index_of(
        self, ids: np.ndarray, known: dict[int, str] | None = None
    ) -> tuple[SpellingIndex, np.ndarray]:
        """A spelling index of the keys of ``ids`` (any shape, -1 pads), and its ids (sorted);
        ``known``: their texts, where a search just returned them."""
        held = sorted_unique(np.asarray(ids, dtype=np.int64).ravel())
        held = held[held >= 0]
        index = SpellingIndex()
        if len(held):
            texts = [known[i] for i in held.tolist()] if known else self._texts.of(held)
            index.add(held, texts)
        return index, held

    def similarity(self, queries: SpellingQueries, ids: np.ndarray) -> np.ndarray:
        """``SpellingIndex.similarity``, on these keys' texts."""
        return self._index_of(ids)[0].similarity(queries, ids)

    def marks(self, queries: SpellingQueries, ids: np.ndarray) -> np.ndarray:
        """``SpellingIndex.marks``, on these keys' texts."""
        return self._index_of(ids)[0].marks(queries, ids)

    def bounded_scores(
        self,
        queries: SpellingQueries,
        ids: np.ndarray,
        meaning: np.ndarray,
        terms: QueryTerms,
        temperature: float,
        keep: int = 1,
    ) -> BoundedBatch:
        """``SpellingIndex.bounded_scores``, on these keys' texts (a mask's few keys)."""
        index = self._index_of(ids)[0]
        return index.bounded_scores(queries, ids, meaning, terms, temperature, keep)

    def candidates(
        self,
        queries: SpellingQueries,
        n: int,
        allow: Allow | None,
        terms: QueryTerms | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``SpellingIndex.candidates``, from pools that Milvus finds by 3-grams."""
        if not n:
            return no_candidates(len(queries), n)
        expression = self._expression(allow)
        limit = max(n, CANDIDATE_POOL)
        vectors = [query_vector(form) for form in queries.forms]
        vectors += [neighbour_vector(form) for form in queries.forms]
        found = self._rows.search_grams(vectors, limit, expression)
        m = len(queries)
        known = {id_: text for hits in found for id_, text in hits}
        self._texts.remember(list(known.items()))
        pools = [
            np.array([id_ for id_, _ in found[i] + found[m + i]], dtype=np.int64) for i in range(m)
        ]
        index, held = self._index_of(np.fromiter(known, np.int64, len(known)), known)
        rows = [sorted_unique(np.searchsorted(held, pool)) for pool in pools]
        return index.best_of_pools(queries, rows, n, terms)
