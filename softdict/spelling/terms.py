"""A batch's combination in score units: the terms of ``combination``'s formula, query by query.

``combination`` says what a store's combination is (its constants, and how it describes a
query); ``query_terms`` turns them into each query's numbers (meaning's factor, the spelling
curve's heights, the marks' weights, the offset), and ``QueryTerms`` computes scores, and the most
a key could score, from them: the one place lookups, calibrate, fit and the Milvus store do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from softdict.spelling.combination import (
    Combination,
    meaning_may_count,
    read_as_code,
    unsure_of_meaning,
)
from softdict.spelling.evidence import EVIDENCE, SAME, markable

__all__ = ["QueryTerms", "query_terms", "ramps"]

# The marks other than ``same``, in their order (``rule-3``: ``same`` weighs at least their sum).
_OTHER_MARKS = [mark for mark in range(len(EVIDENCE)) if mark != SAME]


def ramps(similarity: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """(..., J): each similarity's part between consecutive knots, from 0 to 1."""
    low, high = knots[:-1], knots[1:]
    s = np.asarray(similarity, dtype=np.float64)[..., None]
    return np.clip((s - low) / (high - low), 0.0, 1.0)


@dataclass(frozen=True)
class _Reading:
    """What a combination whose x reads the query's best meaning score (``rule-8``) needs to
    make its terms again once that score is known: x as the text alone gives it, and how."""

    combination: Combination
    x: np.ndarray
    codes: np.ndarray  # (m,) bool: which queries are typed as codes (``typed_as_code``)
    lexical: float
    unit: float
    as_cosine: Callable[[np.ndarray], np.ndarray]

    def subset(self, rows: np.ndarray) -> _Reading:
        return _Reading(
            self.combination, self.x[rows], self.codes[rows], self.lexical, self.unit,
            self.as_cosine,
        )  # fmt: skip


@dataclass(frozen=True)
class QueryTerms:
    """A batch's combination, query by query, in score units (module docstring).

    Attributes:
        knots: (J + 1,) the ramps' knots.
        scale: (m,) meaning's factor.
        offset: (m,) what every key's score gets alike (softmax does not see it).
        slopes: (m, J) each ramp's weight (>= 0).
        marks: (m, E) each mark's weight (>= 0).
        same_outweighs: whether ``same`` weighs at least every other mark together
            (``rule-3``), which makes it the most marks can add to a key (``most_gain``).
        reading: under a combination whose x reads the query's best meaning score
            (``rule-8``), what ``given_meaning`` needs; None under the others.
    """

    knots: np.ndarray
    scale: np.ndarray
    slopes: np.ndarray
    marks: np.ndarray
    offset: np.ndarray
    same_outweighs: bool = False
    reading: _Reading | None = None

    @functools.cached_property
    def reads_meaning(self) -> np.ndarray:
        """(m,) bool: the queries whose terms may change with their best meaning score
        (``given_meaning``); a lookup reads that score before it spells them."""
        if self.reading is None or not self.reading.codes.any():  # most queries: no code
            return np.zeros(len(self.scale), dtype=bool)
        return meaning_may_count(self.reading.x, self.reading.codes)

    def given_meaning(self, best: np.ndarray) -> QueryTerms:
        """The terms once each query's best meaning score over the keys it may attend to is
        known ((m,), in the store's similarity; -inf: no key), as ``rule-8`` reads it
        (``combination.unsure_of_meaning``); these terms where nothing changes, or where the
        combination does not read it. The same ``best`` gives the same terms, however often."""
        reading = self.reading
        if reading is None:
            return self
        best_cosine = reading.as_cosine(np.asarray(best, dtype=np.float64))
        x = unsure_of_meaning(reading.x, reading.codes, best_cosine)
        if np.array_equal(x, reading.x):
            return self
        return _terms(reading.combination, x, reading.lexical, reading.unit, reading)

    @property
    def floor(self) -> float:
        """Spelling at or below this adds nothing."""
        return float(self.knots[0])

    @property
    def weight(self) -> np.ndarray:
        """(m,) the most spelling alone can add to a score (an exact spelling match)."""
        return self.slopes.sum(axis=1)

    @property
    def weighs_marks(self) -> bool:
        """Whether the combination weighs marks (``evidence``): else none need be made."""
        return self.marks.shape[1] > 0

    def marks_count_for(self, form: str) -> bool:
        """Whether a mark could add to any key's score for a query of this spelling form: the
        combination weighs marks and the query is long enough to bear one."""
        return self.weighs_marks and markable(form)

    def could_gain(self, ceiling: np.ndarray, could_mark: np.ndarray | None) -> np.ndarray:
        """Which keys spelling or marks could add to, of any shape: a spelling ``ceiling`` above
        the first knot (at or below it spelling adds nothing), or a possible mark (``could_mark``;
        None: none). The others' scores are exactly their meaning part."""
        opened = ceiling > self.floor
        if could_mark is not None:
            opened |= could_mark
        return opened

    def subset(self, rows: np.ndarray) -> QueryTerms:
        """The terms of the queries ``rows``, in that order (the terms themselves when that is
        every query: a lookup of one query takes its batch's terms query by query)."""
        if len(rows) == len(self.scale) == 1 and rows[0] == 0:
            return self
        part = QueryTerms(
            self.knots,
            self.scale[rows],
            self.slopes[rows],
            self.marks[rows],
            self.offset[rows],
            self.same_outweighs,
            None if self.reading is None else self.reading.subset(rows),
        )
        # What the batch's terms derived already holds for these queries.
        part.__dict__["_heights"] = self._heights[rows]
        if self._meaning_alone:
            part.__dict__["_meaning_alone"] = True
        return part

    def meaning_part(self, meaning: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Meaning's part of the score, with the query's offset: (m, c) scores of the batch, or
        (p,) scores of the queries ``rows`` (p,). Where every scale is 1 and every offset 0 (the
        hand-set rule) it is ``meaning`` itself as float64, not a copy."""
        meaning = np.asarray(meaning, dtype=np.float64)
        if self._meaning_alone:  # the hand-set rule's terms: meaning itself (no pass over it)
            return meaning
        scale = self.scale[:, None] if rows is None else self.scale[rows]
        offset = self.offset[:, None] if rows is None else self.offset[rows]
        if np.all(self.scale > 0):  # padding (-inf) stays -inf by itself
            return meaning * scale + offset
        # Where meaning weighs nothing, padding must still be -inf (0 · -inf is NaN).
        with np.errstate(invalid="ignore"):
            return np.where(meaning == -np.inf, -np.inf, meaning * scale + offset)

    @functools.cached_property
    def _meaning_alone(self) -> bool:
        """Whether meaning's part is meaning itself: every scale 1, every offset 0."""
        return bool(np.all(self.scale == 1.0) and not np.any(self.offset))

    @functools.cached_property
    def _heights(self) -> np.ndarray:
        """(m, J + 1): each query's spelling part at each knot, the ramps' weights summed."""
        return np.concatenate([np.zeros((len(self.slopes), 1)), self.slopes.cumsum(axis=1)], 1)

    def spelling_part(
        self, similarity: np.ndarray, rows: np.ndarray | int | None = None
    ) -> np.ndarray:
        """What spelling adds: (m, c) similarities of the batch, or (p,) of queries ``rows``
        (an int: every one of query ``rows``). NaN (a similarity not known) counts as 0 here:
        callers bound it separately.

        The sum of the ramps is the piecewise-linear curve through each knot's height (0 below
        the first knot, every weight above the last), which np.interp reads in one pass per
        query: on 10^4 keys as fast as the (c, J) ramps for the rule's one ramp, 10x faster for
        the learned combination's five."""
        found = np.asarray(similarity, dtype=np.float64)
        found = np.where(np.isnan(found), 0.0, found)
        heights = self._heights
        if len(heights) == 1 or isinstance(rows, int):  # one query's: in one pass
            return np.interp(found, self.knots, heights[0 if len(heights) == 1 else rows])
        if rows is None:
            return np.array(
                [np.interp(row, self.knots, height) for row, height in zip(found, heights)]
            ).reshape(found.shape)
        rows = np.asarray(rows)
        part = np.empty(found.shape)
        if not len(rows):
            return part
        # One np.interp per query, over its keys: rows grouped by query (a batch's pairs come
        # so) are split where the query changes, any other order is sorted first.
        order = None if np.all(rows[:-1] <= rows[1:]) else np.argsort(rows, kind="stable")
        grouped = rows if order is None else rows[order]
        spans = np.split(
            np.arange(len(rows)) if order is None else order,
            np.flatnonzero(grouped[1:] != grouped[:-1]) + 1,
        )
        for span in spans:
            part[span] = np.interp(found[span], self.knots, heights[rows[span[0]]])
        return part

    def marks_part(
        self, marks: np.ndarray | None, rows: np.ndarray | int | None = None
    ) -> np.ndarray:
        """What the marks add: ``marks`` (m, c, E) of the batch, or (p, E) of queries ``rows``
        (an int: every one of query ``rows``); None: no marks (0)."""
        if marks is None or not self.weighs_marks:
            return np.zeros(0 if marks is None else marks.shape[:-1])
        weights = self.marks[:, None, :] if rows is None else self.marks[rows]
        return (marks * weights).sum(axis=-1)

    def score(
        self,
        meaning: np.ndarray,
        similarity: np.ndarray,
        marks: np.ndarray | None = None,
        rows: np.ndarray | None = None,
    ) -> np.ndarray:
        """The combined score (module docstring); padding (meaning -inf) stays -inf."""
        return self.meaning_part(meaning, rows) + self.gain(similarity, marks, rows)

    def gain(
        self,
        similarity: np.ndarray,
        marks: np.ndarray | None,
        rows: np.ndarray | int | None = None,
    ) -> np.ndarray:
        """What spelling and ``marks`` (None: none) add to a score, beyond its meaning part."""
        total = self.spelling_part(similarity, rows)
        if marks is not None and self.weighs_marks:
            total = total + self.marks_part(marks, rows)
        return total

    def upper(
        self,
        meaning: np.ndarray,
        ceiling: np.ndarray,
        could_mark: np.ndarray | None,
        rows: np.ndarray | None = None,
    ) -> np.ndarray:
        """The most a key can score, (m, c) for the batch or (p,) for queries ``rows``, whose
        similarity is at most ``ceiling`` and which bears a mark only where ``could_mark``
        (None: nowhere): its meaning part and ``most_gain``."""
        return self.meaning_part(meaning, rows) + self.most_gain(ceiling, could_mark, rows)

    def most_gain(
        self,
        ceiling: np.ndarray,
        could_mark: np.ndarray | None,
        rows: np.ndarray | int | None = None,
    ) -> np.ndarray:
        """The most spelling and marks can add to a key's score (``gain``), (m, c) for the batch
        or (p,) for queries ``rows`` (an int: every one of query ``rows``), where its similarity
        is at most ``ceiling`` and it bears a mark only where ``could_mark`` (None: nowhere):
        the spelling part grows with s, and every mark weighs at least 0. A key bears ``same``
        or the others, never both, so where ``same`` outweighs them together it is the most
        (every mark's sum, elsewhere: a looser bound, which ``rule-2`` keeps so that its stores
        spell the keys they did and answer as they did)."""
        total = self.spelling_part(ceiling, rows)
        if could_mark is not None and self.weighs_marks:
            most = self.marks[:, SAME] if self.same_outweighs else self.marks.sum(axis=1)
            total = total + np.where(could_mark, most[:, None] if rows is None else most[rows], 0)
        return total


def query_terms(
    combination: Combination,
    texts: list[str],
    lexical: float,
    unit: float,
    as_cosine: Callable[[np.ndarray], np.ndarray] | None = None,
) -> QueryTerms:
    """The terms of ``texts`` under ``combination``, with the store's ``lexical`` and ``unit``
    (one cosine in its similarity), and ``as_cosine``, its scores as cosines (needed by a
    combination that reads the best meaning score, ``rule-8``: the identity where not given)."""
    width = len(combination.ramps[0])
    x = np.array([combination.describe(text) for text in texts], dtype=np.float64)
    x = x.reshape(len(texts), width)
    reading = None
    if combination.codes is not None:  # rule-8: a query typed as a code is read as one
        codes = np.array([combination.codes(text) for text in texts], dtype=bool)
        if codes.any():
            x = read_as_code(x, codes)
        as_cosine = as_cosine or (lambda scores: scores)
        reading = _Reading(combination, x, codes, lexical, unit, as_cosine)
    return _terms(combination, x, lexical, unit, reading)


def _terms(
    combination: Combination,
    x: np.ndarray,
    lexical: float,
    unit: float,
    reading: _Reading | None,
) -> QueryTerms:
    """The terms of queries described by ``x`` (m, D) (``query_terms``)."""
    arrays = combination.arrays
    scale = np.ones(len(x))
    if combination.meaning_parts:
        factor = np.maximum(0.0, 1.0 + x[:, arrays.meaning_parts] @ arrays.meaning)
        scale = np.maximum(0.0, 1.0 + lexical * (factor - 1.0))
    slopes = lexical * unit * (x @ arrays.ramps)
    marks = np.zeros((len(x), 0))
    if combination.marks:
        marks = lexical * unit * (x @ arrays.marks)
        if combination.same_outweighs:
            others = marks[:, _OTHER_MARKS].sum(axis=1)
            marks[:, SAME] = np.maximum(marks[:, SAME], others)
    offset = np.zeros(len(x))
    if combination.offset:
        offset = lexical * unit * (x @ arrays.offset)
    knots = arrays.knots
    terms = QueryTerms(knots, scale, slopes, marks, offset, combination.same_outweighs, reading)
    if not combination.meaning_parts and not combination.offset:  # known without a pass
        terms.__dict__["_meaning_alone"] = True
    return terms
