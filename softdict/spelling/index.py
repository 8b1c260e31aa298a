"""``SpellingIndex``: what the spelling channel holds for a store's keys.

Each key's spelling form (and token-sorted form) by id, in rows appended in id order like an
index backend's, with tombstones for deleted keys until they outnumber live ones. Small stores
score every key's spelling (``similarity`` over all ids); large ones ask ``candidates`` for the
keys spelled most like the query, which the 3-gram postings (``ngrams``) find among millions.
The postings are built once the index holds more keys than a lookup scores exactly
(``EXACT_MAX_KEYS``: building them for 10^6 keys takes about 5 s, better spent in the insert
than in one unlucky lookup), or on the first candidate request of a smaller store (an
approximate backend's), so a small store on an exact backend never holds them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from softdict._config import EXACT_MAX_KEYS
from softdict._files import FileReader, StoreFiles
from softdict._rows import GrowableColumns, GrowableRows
from softdict.index._ids import IdRows
from softdict.index.base import Allow, sorted_unique
from softdict.spelling.bounded import BoundedBatch
from softdict.spelling.bounds import BUCKETS, character_counts, could_mark, several_words
from softdict.spelling.evidence import (
    EVIDENCE,
    WORD_START,
    evidence_marks,
    markable,
    word_start_marks,
)
from softdict.spelling.held_keys import HeldKeys, score_held_keys
from softdict.spelling.marked import RowsByFirst, proposed_outside, short_neighbours
from softdict.spelling.ngrams import NgramCandidates
from softdict.spelling.prepared import PreparedKeys, accented_columns
from softdict.spelling.reach import best_by_gain, reach
from softdict.spelling.scores import KeyForms, object_column, spelling_similarity
from softdict.spelling.terms import QueryTerms
from softdict.spelling.text import SpellingQueries, spelled

__all__ = ["CANDIDATE_POOL", "SpellingIndex", "no_candidates"]

# How many rows the 3-gram postings propose per query, for exact spelling scores (spelling them
# took 0.6 ms a query on 10^5 real names here, 1.2 ms on 10^6, in one-off timings: a good part
# of a large store's lookup). With it, the union held the best key by the combined score over
# every key for 0.975 to 1.00 of queries at 10^6 keys (benchmarks/matching_scale.py).
CANDIDATE_POOL = 2048


def no_candidates(m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(m, n) ids and similarities of no candidate: -1 and NaN."""
    return np.full((m, n), -1, dtype=np.int64), np.full((m, n), np.nan)


class SpellingIndex:
    """Spelling forms of keys by id, and spelling candidates (see the module docstring)."""

    def __init__(self) -> None:
        self._rows = IdRows()
        self._forms = GrowableRows((), object)
        self._sorted_forms = GrowableRows((), object)
        # Each key's accented form and its words sorted: the forms themselves (the same
        # objects) but for the keys that bore accents, ``_accented_rows`` of them.
        self._accented = GrowableRows((), object)
        self._accented_sorted = GrowableRows((), object)
        self._accented_rows = 0
        # Each form's first character (its code point; -1 when empty) and length (0: empty, alike
        # to nothing), for short queries' neighbours.
        self._first = GrowableRows((), np.int32)
        self._length = GrowableRows((), np.int32)
        # Each form's character counts, for the ceiling on its spelling similarity (``bounds``).
        self._counts = GrowableColumns(BUCKETS, np.uint8)
        self._multiword_rows = 0  # rows (tombstones included) whose form has several words
        # Whether sorting a form's words changes it, or putting its accented form's words in
        # that order (``text.sorted_like``) changes that: only those keys' sorted forms can
        # score otherwise than their forms (``scores``).
        self._reordered = GrowableRows((), bool)
        self._empty_rows = 0
        self._ngrams: NgramCandidates | None = None
        self._by_first = RowsByFirst()  # sorted when a candidate request first needs it

    def __len__(self) -> int:
        return self._rows.n_live

    def prepare(self, keys: list[str]) -> PreparedKeys:
        """The forms (and, where the postings exist, the 3-grams) of new ``keys``: the slow part
        of adding them, which changes nothing, so a store does it before its commit."""
        pairs = [spelled(key) for key in keys]
        forms = [form for form, _ in pairs]
        grams = self._ngrams.grams(forms) if self._ngrams is not None else None
        return PreparedKeys.of_forms(forms, grams, [kept for _, kept in pairs])

    def add(self, ids: np.ndarray, keys: PreparedKeys | list[str]) -> None:
        """New keys under ``ids`` (increasing, larger than any held): quick appends when
        ``keys`` were prepared; then ``maintain`` builds or merges the postings when due."""
        prepared = keys if isinstance(keys, PreparedKeys) else self.prepare(keys)
        grams = prepared.grams
        if self._ngrams is not None and grams is None:
            grams = self._ngrams.grams(prepared.forms)
        first = np.array([ord(form[0]) if form else -1 for form in prepared.forms], np.int32)
        length = np.array([len(form) for form in prepared.forms], np.int32)
        forms, sorted_forms = object_column(prepared.forms), object_column(prepared.sorted_forms)
        multiword = sum(a is not b for a, b in zip(prepared.forms, prepared.sorted_forms))
        accented, accented_sorted = accented_columns(prepared)
        reordered = np.not_equal(sorted_forms, forms) | np.not_equal(accented_sorted, accented)
        # Only appends from here, each a quick one.
        self._rows.append(np.asarray(ids, dtype=np.int64))
        self._forms.append(forms)
        self._sorted_forms.append(sorted_forms)
        self._accented.append(accented)
        self._accented_sorted.append(accented_sorted)
        self._accented_rows += sum(a is not b for a, b in zip(prepared.accented, prepared.forms))
        self._first.append(first)
        self._length.append(length)
        self._counts.append(character_counts(prepared.forms))
        self._multiword_rows += multiword
        self._reordered.append(np.asarray(reordered, dtype=bool))
        self._empty_rows += int(np.count_nonzero(length == 0))
        if self._ngrams is not None:
            self._ngrams.add(grams)

    def maintain(self) -> None:
        """Build the postings once the index holds more keys than a lookup scores exactly
        (``EXACT_MAX_KEYS``), or merge new rows into them when due. Slow, but changes nothing
        until it is done: a store calls it after its own state is whole."""
        if self._ngrams is None:
            if self._rows.n_live > EXACT_MAX_KEYS:
                self._build_postings()
        else:
            self._ngrams.maintain()

    def _build_postings(self) -> None:
        ngrams = NgramCandidates()
        ngrams.add(ngrams.grams(self._forms.view.tolist()))
        ngrams.maintain(force=True)
        self._ngrams = ngrams

    def remove(self, ids: np.ndarray) -> None:
        """Forget ``ids``; ids not held are ignored. Compaction, when due, keeps the live rows
        of every column; the postings are then rebuilt by ``maintain`` (in a large store) or by
        the next candidate request."""
        self._rows.remove(np.asarray(ids, dtype=np.int64))
        if not self._rows.needs_compaction:
            return
        live = self._rows.live_rows()
        self._rows.keep(live)
        for column in (
            self._forms, self._sorted_forms, self._accented, self._accented_sorted,
            self._reordered, self._first, self._length, self._counts,
        ):  # fmt: skip
            column.keep(live)
        self._multiword_rows = int(
            sum(a is not b for a, b in zip(self._forms.view, self._sorted_forms.view))
        )
        self._accented_rows = int(
            sum(a is not b for a, b in zip(self._accented.view, self._forms.view))
        )
        self._empty_rows = int(np.count_nonzero(self._length.view == 0))
        self._ngrams = None
        self._by_first.reset()

    # -- scoring --------------------------------------------------------------------------------

    def _key_forms(self, rows: np.ndarray | None) -> KeyForms:
        """The forms of ``rows`` (None: every row, tombstones included)."""

        def part(column: GrowableRows) -> np.ndarray:
            return column.view if rows is None else column.view[rows]

        return KeyForms(
            part(self._forms),
            part(self._sorted_forms) if self._multiword_rows else None,
            part(self._length) == 0 if self._empty_rows else None,
            (part(self._accented), part(self._accented_sorted)) if self._accented_rows else None,
            part(self._reordered) if self._multiword_rows else None,
        )

    def _rows_of_held(self, ids: np.ndarray) -> np.ndarray | None:
        """The rows of ``ids``, all held; None when they are every row, in order."""
        if len(ids) == self._rows.size and np.array_equal(ids, self._rows.ids):
            return None
        return self._held_rows(ids)

    def similarity(self, queries: SpellingQueries, ids: np.ndarray) -> np.ndarray:
        """Spelling similarity of each query with the keys of ``ids``: (c,) ids shared by every
        query, or (m, c) one row per query with -1 for padding (NaN there). Float64 (m, c)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            forms = self._key_forms(self._rows_of_held(ids))
            return spelling_similarity(queries, forms).astype(np.float64)
        result = np.full(ids.shape, np.nan)
        for i, row_ids in enumerate(ids):
            found = row_ids >= 0
            rows = self._held_rows(row_ids[found])
            result[i, found] = spelling_similarity(queries.row(i), self._key_forms(rows))[0]
        return result

    def marks(self, queries: SpellingQueries, ids: np.ndarray) -> np.ndarray:
        """The marks (``evidence``) of each query with the keys of ``ids``: (c,) ids shared by
        every query, or (m, c) one row per query with -1 for padding (no mark there). Float64
        (m, c, E)."""
        ids = np.asarray(ids, dtype=np.int64)
        shape = ids.shape if ids.ndim == 2 else (len(queries), len(ids))
        result = np.zeros((*shape, len(EVIDENCE)))
        for i in range(len(queries)):
            row_ids = ids[i] if ids.ndim == 2 else ids
            found = np.flatnonzero(row_ids >= 0)
            result[i, found] = self._marks_of_rows(queries, i, self._held_rows(row_ids[found]))
        return result

    def spelling_of(
        self, queries: SpellingQueries, ids: np.ndarray, terms: QueryTerms
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``similarity`` and ``marks`` (None where ``terms`` weigh none) of the keys of ``ids``
        (m, c), -1 for padding, spelled only where spelling could add to their scores under
        ``terms`` (``reach``): elsewhere the similarity is NaN (0 where no character is shared)
        and the marks 0, and spelling adds exactly nothing to the score."""
        ids = np.asarray(ids, dtype=np.int64)
        similarity = np.full(ids.shape, np.nan)
        marks = np.zeros((*ids.shape, len(EVIDENCE))) if terms.weighs_marks else None
        for i, row_ids in enumerate(ids):
            found = np.flatnonzero(row_ids >= 0)
            rows = self._held_rows(row_ids[found])
            can = reach(
                queries, i, terms, self._counts.view, self._length.view, self._first.view, rows
            )
            similarity[i, found[can.ceiling == 0]] = 0.0
            spelled, at = found[can.open], rows[can.open]
            similarity[i, spelled] = spelling_similarity(queries.row(i), self._key_forms(at))[0]
            if marks is not None:
                could = None if can.could is None else can.could[can.open]
                marks[i, spelled] = self._marks_of_rows(queries, i, at, could)
        return similarity, marks

    def _marks_of_rows(
        self, queries: SpellingQueries, i: int, rows: np.ndarray, could: np.ndarray | None = None
    ) -> np.ndarray:
        """(len(rows), E): query ``i``'s marks with the keys of ``rows``. Only keys that hold
        every character of the query can bear one (``bounds.could_mark``; ``could``: which of
        ``rows`` do, where the caller has it already): the others are not looked at. Of those,
        a key that does not begin with the query's first character can bear a later word's
        start only (``evidence.word_start_marks``: one substring test instead of five)."""
        marks = np.zeros((len(rows), len(EVIDENCE)))
        form = queries.forms[i]
        if not markable(form):
            return marks
        if could is None:
            could = could_mark(queries.counts[i], self._counts.view, rows)
        possible = np.flatnonzero(could)
        if not len(possible):  # often so for a misspelt query: no key holds all its letters
            return marks
        begins = self._first.view[rows[possible]] == ord(form[0])
        alike, other = possible[begins], possible[~begins]
        if len(alike):
            marks[alike] = evidence_marks(form, list(self._forms.view[rows[alike]]))
        if len(other):
            marks[other, WORD_START] = word_start_marks(form, list(self._forms.view[rows[other]]))
        return marks

    def _held_rows(self, ids: np.ndarray) -> np.ndarray:
        rows = self._rows.rows_of(ids)
        if len(rows) != len(ids):
            raise KeyError("the spelling index was asked for ids it does not hold")
        return rows

    def bounded_scores(
        self,
        queries: SpellingQueries,
        ids: np.ndarray,
        meaning: np.ndarray,
        terms: QueryTerms,
        temperature: float,
        keep: int = 1,
    ) -> BoundedBatch:
        """Each query's combined score over the keys of ``ids`` (c,), all held, from their
        ``meaning`` (m, c) and the queries' ``terms``, spelling scored where it can matter
        (``held_keys.score_held_keys``)."""
        rows = self._rows_of_held(np.asarray(ids, dtype=np.int64))
        lengths = self._length.view if rows is None else self._length.view[rows]

        def marks(i: int, positions: np.ndarray, could: np.ndarray) -> np.ndarray:
            held = positions if rows is None else rows[positions]
            return self._marks_of_rows(queries, i, held, could)

        first = self._first.view if rows is None else self._first.view[rows]
        keys = HeldKeys(
            self._counts.view, rows, lengths.astype(np.float32), self._key_forms(rows), marks,
            first, several_words(self._counts.view, rows),
        )  # fmt: skip
        return score_held_keys(queries, keys, meaning, terms, temperature, keep)

    def candidates(
        self,
        queries: SpellingQueries,
        n: int,
        allow: Allow | None,
        terms: QueryTerms | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``n`` allowed keys spelled most like each query: ids (m, n), best first, and
        their spelling similarities (m, n) float64, padded with -1 and NaN. With ``terms``,
        "most like" is by what spelling and marks add to the queries' scores (a key a mark
        points at ranks by it too), then by similarity, else by similarity alone."""
        if not self._rows.n_live or not n:
            return no_candidates(len(queries), n)
        if self._ngrams is None:
            self._build_postings()
        assert self._ngrams is not None
        admissible = None
        if allow is not None:
            admissible = np.zeros(self._rows.size, dtype=np.bool_)
            admissible[self._rows.rows_of(allow.ids)] = True
        elif self._rows.has_tombstones:
            admissible = self._rows.live
        pools = self._ngrams.search(queries.forms, max(n, CANDIDATE_POOL), admissible)
        # Each pool with its short neighbours, sorted: numpy's hash-based union1d took 0.3 ms
        # for a pool's 2,048 rows.
        pools = [
            sorted_unique(np.concatenate([pool, self._short_neighbours(form, admissible)]))
            for pool, form in zip(pools, queries.forms)
        ]
        outside = self.outside_proposals(queries, terms, admissible)
        return self.best_of_pools(queries, pools, n, terms, outside)

    def outside_proposals(
        self,
        queries: SpellingQueries,
        terms: QueryTerms | None,
        admissible: np.ndarray | None,
        among: list[np.ndarray] | None = None,
    ) -> Callable[..., np.ndarray] | None:
        """``best_of_pools``' ``outside`` for these queries: the rows (``admissible`` only;
        ``among[i]`` only, where given) a mark, or a short query's spelling, could lift past a
        pool's candidates though they share no 3-gram with the query
        (``marked.proposed_outside``); None without ``terms``."""
        if terms is None:
            return None
        return functools.partial(
            proposed_outside, self._by_first, self._first.view, self._counts.view,
            self._length.view, queries, terms=terms, admissible=admissible, among=among,
        )  # fmt: skip

    def best_of_pools(
        self,
        queries: SpellingQueries,
        pools: list[np.ndarray],
        n: int,
        terms: QueryTerms | None = None,
        outside: Callable[..., np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``candidates`` chosen among each query's ``pools`` (rows of this index), scored
        exactly as far as choosing them needs (``_pool_gains``): the same (m, n) ids and
        similarities.
        ``outside(i, pool=, threshold=)``, where given, names more rows of query ``i`` whose
        gain could exceed the ``threshold`` the pool's n best set (``marked.proposed_outside``):
        they are scored too."""
        ids, similarities = no_candidates(len(queries), n)
        for i, pool in enumerate(pools):
            scores, gain = self._pool_gains(queries, i, pool, n, terms)
            if outside is not None:
                threshold = -np.inf if len(pool) < n else np.partition(gain, -n)[-n]
                more = outside(i, pool=pool, threshold=threshold)
                if len(more):
                    more_scores, more_gain = self._gains(queries, i, more, terms)
                    pool = np.concatenate([pool, more])
                    scores = np.concatenate([scores, more_scores])
                    gain = np.concatenate([gain, more_gain])
            # By gain, then by similarity among keys of equal gain (below the first knot: 0).
            best = np.lexsort((-scores, -gain))[:n]
            ids[i, : len(best)] = self._rows.ids[pool[best]]
            similarities[i, : len(best)] = scores[best]
        return ids, similarities

    def _pool_gains(
        self, queries: SpellingQueries, i: int, pool: np.ndarray, n: int, terms: QueryTerms | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``_gains`` of the ``pool``'s rows, spelled only as far as choosing the n best needs
        (``reach.best_by_gain``: NaN and -inf where not spelled, a gain of 0 where spelling adds
        nothing); without ``terms``, every row spelled."""
        if terms is None:
            return self._gains(queries, i, pool, terms)
        can = reach(queries, i, terms, self._counts.view, self._length.view, self._first.view, pool)

        def exact(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            could = None if can.could is None else can.could[positions]
            return self._gains(queries, i, pool[positions], terms, could)

        return best_by_gain(can.upper(terms), n, exact)

    def _gains(
        self,
        queries: SpellingQueries,
        i: int,
        rows: np.ndarray,
        terms: QueryTerms | None,
        could: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Query ``i``'s spelling similarity with the keys of ``rows``, and what spelling and
        marks add to its scores (0 without ``terms``); ``could``, where the caller has it,
        which of ``rows`` could bear a mark (``_marks_of_rows``)."""
        scores = spelling_similarity(queries.row(i), self._key_forms(rows))[0]
        if terms is None:
            return scores, np.zeros(len(rows))
        marks = self._marks_of_rows(queries, i, rows, could) if terms.weighs_marks else None
        return scores, terms.gain(scores, marks, i)

    def _short_neighbours(self, form: str, admissible: np.ndarray | None) -> np.ndarray:
        """``marked.short_neighbours`` of this index's rows."""
        first, lengths = self._first.view, self._length.view
        return short_neighbours(self._by_first, first, lengths, form, admissible)

    def memory_bytes(self) -> int:
        """Bytes held for the forms (the strings themselves included) and the postings."""
        import sys

        forms = self._forms.view
        strings = sum(sys.getsizeof(form) for form in forms)
        for column in (self._sorted_forms, self._accented, self._accented_sorted):
            strings += sum(sys.getsizeof(s) for s, form in zip(column.view, forms) if s is not form)
        arrays = forms.nbytes + self._sorted_forms.view.nbytes
        arrays += self._accented.view.nbytes + self._accented_sorted.view.nbytes
        arrays += self._first.view.nbytes + self._length.view.nbytes + self._counts.view.nbytes
        arrays += self._reordered.view.nbytes
        ngrams = self._ngrams.nbytes() if self._ngrams is not None else 0
        return int(strings + arrays + self._rows.nbytes() + ngrams + self._by_first.nbytes())

    # -- persistence ----------------------------------------------------------------------------

    def dump(self) -> StoreFiles:
        """The 3-gram postings, when built and free of deleted keys (else nothing: the forms
        come from the keys, and the postings are rebuilt when first needed)."""
        if self._ngrams is None or self._rows.has_tombstones:
            return {}
        return self._ngrams.files()

    @classmethod
    def restore(cls, ids: np.ndarray, keys: list[str], files: FileReader) -> SpellingIndex:
        """The index of ``keys`` under ``ids`` (increasing), with saved postings if any."""
        index = cls()
        index.add(ids, keys)
        index._ngrams = NgramCandidates.from_files(files, len(keys))
        if index._ngrams is None:
            index.maintain()
        return index
