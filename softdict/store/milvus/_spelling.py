"""The spelling channel of a large Milvus store, served by Milvus: this process holds no key.

Candidates come from a search of the keys' 3-gram field (``_grams``): each query's
``CANDIDATE_POOL`` best keys by shared 3-grams, for a short one-word query the keys of its
first letter and about its length, and, under a combination that weighs marks, the keys that
begin with its first character ranked by how many of its characters they hold (the pair
features of format 4), come back with their texts in one request, and are scored exactly here
(``SpellingIndex.best_of_pools``, the marked ones where a mark, or a short query's spelling,
could lift them), as the memory store scores its pool. Spelling similarities and marks of
other keys (the dense search's, a sampled tail's) are scored from their texts, which come back
with those searches and samples (``MilvusBackend``'s ``seen``), or else are fetched by id.

Keys' spelling forms are cached by id, up to ``FORMS_CACHED`` of them (the most recently used
or, for keys never asked about, first seen):
a key's id is a hash of its text (``_ids``), so an id never names another text, and a cached
form is never stale (a deleted key's id is simply no longer found by searches).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from softdict.index.base import Allow, sorted_unique
from softdict.spelling.bounded import BoundedBatch
from softdict.spelling.index import CANDIDATE_POOL, SpellingIndex, no_candidates
from softdict.spelling.prepared import PreparedKeys
from softdict.spelling.terms import QueryTerms
from softdict.spelling.text import Spelled, SpellingQueries, spelled
from softdict.store.milvus._collection import KeyRows
from softdict.store.milvus._grams import mark_vector, neighbour_vector, query_vectors
from softdict.store.milvus.backend import changed_during_lookup

__all__ = ["FORMS_CACHED", "FormCache", "MilvusSpelling"]

# Forms kept by id in a process (a form and its accented form, the same object where the key
# bore no accent: about 160 bytes for a short key, ~21 MB). A lookup asks for
# a few thousand at most (a candidate pool, the dense head, a sampled tail).
FORMS_CACHED = 1 << 17


class FormCache:
    """Keys' spelling forms by id: the most recently used ``limit`` of them (see the module
    docstring). Spelling a key's form took most of building a pool's index (12 us a key), so a
    key noted with a search's results (``note``: most are never asked about) is kept as its
    text, and spelled when first asked for."""

    def __init__(self, rows: Callable[[], KeyRows | None], limit: int = FORMS_CACHED) -> None:
        self._rows = rows
        self._limit = limit
        # A key's text until it is spelled, then its form and accented form (``Spelled``; the
        # id is then in ``_spelled``).
        self._kept: OrderedDict[int, Any] = OrderedDict()
        self._spelled: set[int] = set()

    def __len__(self) -> int:
        return len(self._kept)

    def note(self, ids: list[int], texts: list[str]) -> None:
        """Keep the keys ``ids`` (with their ``texts``) not kept yet, unspelled, as the most
        recent. A key kept already keeps its place: noting is not using (a lookup notes
        thousands of keys, and moving each one was half the cost of noting them); a key asked
        for moves to the end (``_form``)."""
        kept = self._kept
        kept.update([(id_, text) for id_, text in zip(ids, texts) if id_ not in kept])
        self._evict()

    def remember(self, found: list[tuple[int, str]]) -> dict[int, Spelled]:
        """Keep the keys ``found`` (id, text); their forms by id."""
        forms = {id_: self._form(id_, text) for id_, text in found}
        self._evict()
        return forms

    def forms_of(self, ids: list[int]) -> dict[int, Spelled]:
        """The forms of ``ids`` (held keys), fetching the texts of those not kept in one
        request; a key deleted since its id was found is an error (``changed_during_lookup``)."""
        missing = [i for i in ids if i not in self._kept]
        fetched = []
        if missing:
            rows = self._rows()
            found = [] if rows is None else rows.get(np.array(missing, np.int64), ["key"])
            if len(found) < len(missing):
                raise changed_during_lookup()
            fetched = [(row["id"], row["key"]) for row in found]
        forms = {id_: self._form(id_, self._kept[id_]) for id_ in ids if id_ in self._kept}
        forms.update(self.remember(fetched))
        return forms

    def _form(self, id_: int, text: str) -> Spelled:
        """The forms of the key ``id_`` (``text``), spelled unless they were, kept as most
        recent."""
        if id_ in self._spelled:
            forms = self._kept[id_]
        else:
            forms = self._kept[id_] = spelled(text)
            self._spelled.add(id_)
        self._kept.move_to_end(id_)
        return forms

    def _evict(self) -> None:
        while len(self._kept) > self._limit:
            id_, _ = self._kept.popitem(last=False)
            self._spelled.discard(id_)


class MilvusSpelling:
    """``SpellingIndex``'s lookup methods over a Milvus store's keys (see the module docstring).

    Args:
        rows: the store's key collection (with its 3-gram field).
        forms: the process's cache of key forms.
        expression: the Milvus filter that admits the keys an ``Allow`` allows.
    """

    def __init__(
        self, rows: KeyRows, forms: FormCache, expression: Callable[[Allow | None], str]
    ) -> None:
        self._rows = rows
        self._forms = forms
        self._expression = expression

    def _index_of(
        self, ids: np.ndarray, known: dict[int, Spelled] | None = None
    ) -> tuple[SpellingIndex, np.ndarray]:
        """A spelling index of the keys of ``ids`` (any shape, -1 pads), and its ids (sorted);
        ``known``: their forms, where a search just returned them."""
        held = sorted_unique(np.asarray(ids, dtype=np.int64).ravel())
        held = held[held >= 0]
        index = SpellingIndex()
        if len(held):
            wanted = held.tolist()
            forms = known if known is not None else self._forms.forms_of(wanted)
            index.add(held, PreparedKeys.of_spelled([forms[i] for i in wanted]))
        return index, held

    def similarity(self, queries: SpellingQueries, ids: np.ndarray) -> np.ndarray:
        """``SpellingIndex.similarity``, on these keys' texts."""
        return self._index_of(ids)[0].similarity(queries, ids)

    def marks(self, queries: SpellingQueries, ids: np.ndarray) -> np.ndarray:
        """``SpellingIndex.marks``, on these keys' texts."""
        return self._index_of(ids)[0].marks(queries, ids)

    def spelling_of(
        self, queries: SpellingQueries, ids: np.ndarray, terms: QueryTerms
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``SpellingIndex.spelling_of``, on these keys' texts."""
        return self._index_of(ids)[0].spelling_of(queries, ids, terms)

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
        """``SpellingIndex.candidates``, from pools that Milvus finds by 3-grams. Where the
        combination weighs marks and the rows hold their pair features (format 4), the keys a
        mark (or a short query's spelling) could lift come back from the same request and are
        proposed from the index of everything it returned (``SpellingIndex.outside_proposals``)."""
        if not n:
            return no_candidates(len(queries), n)
        expression = self._expression(allow)
        limit = max(n, CANDIDATE_POOL)
        vectors = query_vectors(queries.forms)
        vectors += [neighbour_vector(form) for form in queries.forms]
        marking = terms is not None and terms.weighs_marks and self._rows.pairs
        if marking:
            vectors += [mark_vector(form) for form in queries.forms]
        found = self._rows.search_grams(vectors, limit, expression)
        m = len(queries)
        known = self._forms.remember([pair for hits in found for pair in hits])
        pools = [
            np.array([id_ for id_, _ in found[i] + found[m + i]], dtype=np.int64) for i in range(m)
        ]
        index, held = self._index_of(np.fromiter(known, np.int64, len(known)), known)
        rows = [sorted_unique(np.searchsorted(held, pool)) for pool in pools]
        outside = None
        if marking:  # each query's own marked keys, so that a batch answers as each query alone
            marked = [
                sorted_unique(
                    np.searchsorted(held, np.array([id_ for id_, _ in found[2 * m + i]], np.int64))
                )
                for i in range(m)
            ]
            outside = index.outside_proposals(queries, terms, None, among=marked)
        return index.best_of_pools(queries, rows, n, terms, outside)
