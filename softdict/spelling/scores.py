"""How alike two texts are spelled: the similarity ``combination`` turns into a score.

* ``spelling`` in [0, 1]: the mean of two of rapidfuzz's normalised similarities on the spelling
  forms, the Indel one (what ``fuzz.ratio`` computes; the better of the forms and the
  token-sorted forms) and the optimal-string-alignment one (a swap of two letters is one edit).
  A query or key with an empty form (punctuation only) is alike to nothing: 0.
* Under ``rule-6`` the OSA similarity is the better of the forms and the token-sorted forms
  too, as the Indel one: the words of a name in another language come in another order
  ("Îles Cook", "Guayana Francesa"), and OSA in the typed order scored them as unlike their
  key as a key that shares only letters. On the dev half of ``benchmarks/matching.py`` it
  ranked the key meant first for 1.5 points more of the country names in 8 languages (with or
  without a typo), and 0.8-1 fewer of the cities' alternate names (transliterations, where a
  short word shared in another order can lift a wrong key); typos and codes were unchanged.
  A token-sorted form holds the characters of its form, so ``bounds``' ceilings hold.
* Under a combination that reads accents (``rule-4`` to ``rule-6``), the similarity of a query
  that bore accents is the mean of the above on the forms and on the accented forms
  (``text.accented_form``: the forms with the accents the texts bore), so one typed with a
  key's accents ("Kolāf" where "Kolar" and "Kolār" are keys) prefers the key that bears them,
  while one in another language's spelling ("México" for a key "Mexico") loses only half of
  what its accents cost. A query without accents compares forms, as before: its writer may
  have left them out ("Sao Paulo"). Each accented form strips to its form character by
  character, and its words sorted in its form's order (``text.sorted_like``) to the sorted
  form, so the similarity of accented forms is at most that of the forms (a common
  subsequence or an edit script of the one is one of the other): ``bounds``' ceilings hold.
* Under ``rule-7`` a query typed without accents scores every key that bears accents
  ``AS_TYPED`` (a ten-thousandth) lower, at least 0: of twins spelled alike but for accents
  ("Banda", "Bānda") it prefers the one spelled as typed, where ``rule-6`` tied them (the
  bundled encoders strip accents too) and the keys' order chose. It is a tie-break, not a
  reading: a letter more or less moves a similarity by about 1/(|q| + |k|), 0.005 between
  names of 100 characters, fifty times more, and a combined score by at most 0.0007 (at
  ``lexical`` 1), so whoever left the accents out of "Sao Paulo" still finds São Paulo. The
  similarity stays at most the forms', so the ceilings hold. Measured first as a thousandth
  of each key's accents' gap (the measure on the forms less that on the accented forms), on
  the dev half of ``benchmarks/matching.py``: 0.05-0.2 points more of cities with typos and a
  stray space, 0.05 fewer of cities' alternate names (one query); a twentieth and a half of
  the gap gained as much or more on generated typos and lost more on real aliases. The
  constant answered as that thousandth did, and one more query of cities with a typo, without
  its second pass of rapidfuzz over the accented forms (which cost 0.05 ms a lookup at 10^3
  and 10^4 keys and 0.37 at 10^5, against 0.02 / 0.02 / 0.13 for the constant, in interleaved
  one-off timings here against ``rule-6``).

The measure (Indel + OSA) was chosen on the dev half of ``benchmarks/matching.py`` (typos and
aliases of real names), with the hand-set rule (``combination``'s rule-1), holding the meaning
measurements of ``benchmarks/matching_design.py`` where they were with meaning alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from softdict.spelling.text import SpellingQueries

__all__ = [
    "AS_TYPED",
    "KeyForms",
    "QueryColumns",
    "object_column",
    "paired_similarity",
    "spelling_similarity",
]

# Texts as rapidfuzz takes them: a list, or an object array of str.
Texts = Sequence[str] | np.ndarray

# Under rule-7, what a query typed without accents loses of its similarity with a key that bears
# accents: a tie-break, 1/50 of what a letter moves a similarity between long names (module
# docstring).
AS_TYPED = 1e-4

# rapidfuzz's threads pay off only on large blocks of pairs (measured: one query against 10^4
# keys is faster on one thread).
_PARALLEL_PAIRS = 200_000


def object_column(texts: list[str]) -> np.ndarray:
    """``texts`` as a (n,) object array (which indexes by positions, as a list does not)."""
    column = np.empty(len(texts), dtype=object)
    column[:] = texts
    return column


@dataclass(frozen=True)
class KeyForms:
    """Keys' spelling forms, as the index hands them to ``spelling_similarity``.

    Attributes:
        forms: (n,) object array of forms.
        sorted_forms: their token-sorted forms, or None where every key is one word (then
            they are the forms).
        empty: (n,) bool, which forms are empty, or None where none is.
        accented: their accented forms (``text.accented_form``) and these with their words in
            their forms' sorted order (``text.sorted_like``), or None where every key's is its
            form.
        reordered: (n,) bool, which keys' sorted forms (or accented sorted forms) differ from
            their forms: a query whose words sorting leaves alike compares only those again in
            sorted order (the others would score as before). None: every key's may differ where
            ``sorted_forms`` are given, none where they are not.
    """

    forms: np.ndarray
    sorted_forms: np.ndarray | None
    empty: np.ndarray | None
    accented: tuple[np.ndarray, np.ndarray] | None = None
    reordered: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.forms)

    def subset(self, positions: np.ndarray) -> KeyForms:
        """The forms at ``positions``."""
        return KeyForms(
            self.forms[positions],
            None if self.sorted_forms is None else self.sorted_forms[positions],
            None if self.empty is None else self.empty[positions],
            None if self.accented is None else tuple(a[positions] for a in self.accented),
            None if self.reordered is None else self.reordered[positions],
        )

    def bearing(self) -> np.ndarray:
        """(n,) bool: which keys bore accents (their accented form is not their form)."""
        if self.accented is None:
            return np.zeros(len(self.forms), dtype=bool)
        return np.asarray(np.not_equal(self.accented[0], self.forms), dtype=bool)

    def compared(self) -> KeyForms:
        """The forms a query that bore accents compares: each key's accented form (its form
        where it bore none)."""
        if self.accented is None:
            return self
        kept, kept_sorted = self.accented
        sorted_kept = None if self.sorted_forms is None else kept_sorted
        return KeyForms(kept, sorted_kept, self.empty, reordered=self.reordered)


def spelling_similarity(queries: SpellingQueries, keys: KeyForms) -> np.ndarray:
    """The spelling similarity (m, n) float32 in [0, 1] of each query with each key."""
    from rapidfuzz import process

    m, n = len(queries), len(keys)
    if not m or not n:
        return np.zeros((m, n), dtype=np.float32)
    workers = -1 if m * n >= _PARALLEL_PAIRS else 1

    def scores(scorer: Any, query_texts: Texts, key_texts: np.ndarray) -> np.ndarray:
        return process.cdist(
            query_texts, key_texts, scorer=scorer, dtype=np.float32, workers=workers
        )

    sort_edits = queries.edits_sorted
    similarity = _similarity(
        scores, queries.forms, queries.sorted_forms, keys, sort_edits, paired=False
    )
    rows = np.flatnonzero(queries.bearing)
    if len(rows):  # the queries that bore accents (which the combination reads): both measures
        kept, kept_sorted = queries.compared_forms()
        picked = rows.tolist()
        accented = _similarity(
            scores,
            [kept[i] for i in picked],
            [kept_sorted[i] for i in picked],
            keys.compared(),
            sort_edits,
            paired=False,
        )
        similarity[rows] = _read_accents(similarity[rows], accented)
    if queries.as_typed:  # rule-7
        plain, accented_keys = ~queries.bearing, np.flatnonzero(keys.bearing())
        if plain.any() and len(accented_keys):
            # Mostly every query is typed without accents: the keys' columns, not a block.
            typed: Any = slice(None) if plain.all() else np.flatnonzero(plain)[:, None]
            block = similarity[typed, accented_keys]
            similarity[typed, accented_keys] = _prefer_as_typed(block)
    return similarity


@dataclass(frozen=True)
class QueryColumns:
    """A batch's query forms as object columns (built once, taken pair by pair): forms, sorted
    forms, and their accented forms where the combination reads accents, else the forms."""

    forms: np.ndarray
    sorted_forms: np.ndarray
    kept: np.ndarray
    kept_sorted: np.ndarray
    bearing: np.ndarray
    edits_sorted: bool = False
    as_typed: bool = False

    @classmethod
    def of(cls, queries: SpellingQueries) -> QueryColumns:
        forms, sorted_forms = object_column(queries.forms), object_column(queries.sorted_forms)
        kept, kept_sorted = forms, sorted_forms  # no accented form is read: none is built
        if queries.accented is not None:
            kept, kept_sorted = (object_column(texts) for texts in queries.accented)
        return cls(
            forms,
            sorted_forms,
            kept,
            kept_sorted,
            queries.bearing,
            queries.edits_sorted,
            queries.as_typed,
        )


def paired_similarity(queries: QueryColumns, rows: np.ndarray, keys: KeyForms) -> np.ndarray:
    """The spelling similarity (p,) float32 of the queries of ``rows`` (p,) each with the key
    beside it in ``keys`` (p keys): the pairs of many queries, each with its own keys, in one
    call per measure (rapidfuzz's ``cpdist``)."""
    from rapidfuzz import process

    if not len(rows):
        return np.zeros(0, dtype=np.float32)
    workers = -1 if len(rows) >= _PARALLEL_PAIRS else 1

    def scores(scorer: Any, query_texts: Texts, key_texts: np.ndarray) -> np.ndarray:
        return process.cpdist(
            query_texts, key_texts, scorer=scorer, dtype=np.float32, workers=workers
        )

    sort_edits = queries.edits_sorted
    similarity = _similarity(
        scores, queries.forms[rows], queries.sorted_forms[rows], keys, sort_edits, paired=True
    )
    at = np.flatnonzero(queries.bearing[rows])
    if len(at):  # the pairs whose query bore accents: both measures
        picked = rows[at]
        accented = _similarity(
            scores,
            queries.kept[picked],
            queries.kept_sorted[picked],
            keys.subset(at).compared(),
            sort_edits,
            paired=True,
        )
        similarity[at] = _read_accents(similarity[at], accented)
    if queries.as_typed:  # rule-7: the pairs of a query typed without accents and a key with some
        at = np.flatnonzero(~queries.bearing[rows] & keys.bearing())
        similarity[at] = _prefer_as_typed(similarity[at])
    return similarity


def _prefer_as_typed(on_forms: np.ndarray) -> np.ndarray:
    """The similarity of a query typed without accents with keys that bear some, from the
    measure on the forms: ``AS_TYPED`` less, at least 0."""
    return np.maximum(on_forms - np.float32(AS_TYPED), np.float32(0.0))


def _read_accents(on_forms: np.ndarray, on_accented: np.ndarray) -> np.ndarray:
    """The similarity of a query that bore accents, from the measure on the forms and on the
    accented forms: their mean (module docstring), at most the first."""
    return (on_forms + on_accented) / 2


def _similarity(
    scores: Callable[[Any, Texts, np.ndarray], np.ndarray],
    forms: Texts,
    sorted_forms: Texts,
    keys: KeyForms,
    edits_sorted: bool,
    *,
    paired: bool,
) -> np.ndarray:
    """The measure (module docstring), with ``scores(scorer, query texts, key texts)`` the
    rapidfuzz call that pairs queries with keys: every pair (m, n), or side by side (p,:
    ``paired``); ``edits_sorted``: OSA compares the sorted forms too (``rule-6``)."""
    from rapidfuzz.distance import OSA, Indel

    indel = scores(Indel.normalized_similarity, forms, keys.forms)
    edits = scores(OSA.normalized_similarity, forms, keys.forms)
    # Sorting changes a form only where the query or a key has several words; where neither
    # changes, the sorted forms are the forms, scored already. Only the other pairs are scored
    # again: a quarter of real names have several words, and these passes cost half the time.
    queries_moved = np.array([a != b for a, b in zip(sorted_forms, forms)], dtype=bool)
    keys_moved = keys.reordered
    if keys_moved is None:
        keys_moved = np.full(len(keys), keys.sorted_forms is not None)
    sorted_keys = keys.forms if keys.sorted_forms is None else keys.sorted_forms
    where: Any
    if paired:  # the pairs whose query or key moved
        where = np.flatnonzero(queries_moved | keys_moved)
        query_texts, key_texts = np.asarray(sorted_forms, dtype=object)[where], sorted_keys[where]
    else:  # every query with the keys that moved, or with every key where a query moved
        columns = slice(None) if queries_moved.any() else np.flatnonzero(keys_moved)
        query_texts, key_texts = sorted_forms, sorted_keys[columns]
        where = (slice(None), columns)
    if len(key_texts):
        found = scores(Indel.normalized_similarity, query_texts, key_texts)
        indel[where] = np.maximum(indel[where], found)
        if edits_sorted:
            found = scores(OSA.normalized_similarity, query_texts, key_texts)
            edits[where] = np.maximum(edits[where], found)
    similarity = (indel + edits) / 2
    # Two empty forms are "equal" to rapidfuzz; to a reader they share no letter.
    similarity[np.array([not form for form in forms], dtype=bool)] = 0.0
    if keys.empty is not None:
        similarity[..., keys.empty] = 0.0
    return similarity
