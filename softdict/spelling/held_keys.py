"""Both channels over every key a spelling index holds: ``bounded``'s one-query and batch forms,
chosen by the number of keys, over the index's character counts and forms.

``SpellingIndex.bounded_scores`` hands over what it holds of the keys (``HeldKeys``); this
module computes each query's spelling ceilings and which keys could bear a mark, and runs the
rounds of ``softdict.spelling.bounded`` query by query, or a block of queries at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from softdict.spelling.bounded import BoundedBatch, bounded_batch, bounded_scores
from softdict.spelling.bounds import ceiling_and_could
from softdict.spelling.evidence import EVIDENCE, may_bear_marks
from softdict.spelling.scores import (
    KeyForms,
    QueryColumns,
    paired_similarity,
    spelling_similarity,
)
from softdict.spelling.terms import QueryTerms
from softdict.spelling.text import SpellingQueries

__all__ = ["HeldKeys", "score_held_keys"]

# A batch's every-key scoring goes in blocks of queries of about this many scores (512 KB
# float64 matrices, which stay in the CPU's caches between the passes over them): 65 queries a
# block against 10^3 keys, 6 against 10^4. In interleaved bulk runs here 2^15 to 2^17 did
# alike within the machine's noise; 2^18 was slower against 10^4 keys.
_BLOCK_ENTRIES = 1 << 16
# Past this many keys a batch goes query by query: its blocks made a bulk lookup 1.8-2.6x as
# fast over 10^3 keys, but over 10^4 0.9-1.3x on bundled-static and 0.94-0.97x on the default
# encoder (interleaved runs here, within the machine's noise), with more to hold.
_BATCH_MAX_KEYS = 4096

# ``marks(query row, positions, could)``: the marks (p, E) of a query with the keys at those
# positions, ``could`` saying which of them could bear one.
Marks = Callable[[int, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class HeldKeys:
    """The c keys scored, as a spelling index holds them.

    Attributes:
        counts: the index's character counts by column, (64, rows) uint8, every row it holds.
        rows: the c keys' rows in it, or None where they are every row, in order.
        lengths: the c keys' form lengths, float32.
        forms: the c keys' forms.
        marks: their marks with a query (``Marks``), by position among the c keys.
        first: the c keys' forms' first characters (code points; -1 for an empty form).
        several_words: (c,) bool, which of the c keys have several words.
    """

    counts: np.ndarray
    rows: np.ndarray | None
    lengths: np.ndarray
    forms: KeyForms
    marks: Marks
    first: np.ndarray
    several_words: np.ndarray


def score_held_keys(
    queries: SpellingQueries,
    keys: HeldKeys,
    meaning: np.ndarray,
    terms: QueryTerms,
    temperature: float,
    keep: int = 1,
) -> BoundedBatch:
    """Each query's combined score over the ``keys`` from their ``meaning`` (m, c) and the
    queries' ``terms``, spelling scored where it can matter (``bounded``), with each query's
    bound on its weights' error and the weights made on the way. ``keep``: the number of best
    keys whose choice must be exact (top-k attention). Several queries over at most
    ``_BATCH_MAX_KEYS`` keys go through the rounds together, in blocks of about
    ``_BLOCK_ENTRIES`` scores."""
    marking = terms.weighs_marks
    m, n = meaning.shape
    combined, similarity, weights = np.empty((3, m, n))
    error, weighed = np.zeros(m), np.zeros(m, dtype=bool)

    def ceilings(block: range) -> tuple[np.ndarray, np.ndarray | None]:
        ceiling = np.empty((len(block), n), dtype=np.float32)
        marked = np.zeros(ceiling.shape, dtype=bool) if marking else None
        for j, i in enumerate(block):
            form = queries.forms[i]
            ceiling[j], could = ceiling_and_could(
                queries.counts[i], len(form), keys.counts, keys.lengths, keys.rows,
                terms.marks_count_for(form),
            )  # fmt: skip
            if marked is not None and could is not None:
                # Of the keys that hold every character of the query, those that begin with
                # another and have one word bear no mark either.
                marked[j] = could & may_bear_marks(form, keys.first, keys.several_words)
        return ceiling, marked

    if m == 1 or n > _BATCH_MAX_KEYS:  # query by query, the one-query form (``bounded``)
        for i in range(m):
            ceiling, marked = ceilings(range(i, i + 1))
            query = queries.row(i)

            def exact(
                positions: np.ndarray,
                query: SpellingQueries = query,
                i: int = i,
                marked: np.ndarray | None = marked,
            ) -> tuple[np.ndarray, np.ndarray | None]:
                found = spelling_similarity(query, keys.forms.subset(positions))[0]
                if marked is None:
                    return found, None
                return found, keys.marks(i, positions, marked[0, positions])

            one = bounded_scores(
                meaning[i], ceiling[0], None if marked is None else marked[0],
                terms.subset(np.array([i])), temperature, exact, keep=keep,
                out=(combined[i], similarity[i], weights[i]),
            )  # fmt: skip
            error[i], weighed[i] = one.error, one.weights is not None
        return BoundedBatch(combined, similarity, error, weights, weighed)

    columns = QueryColumns.of(queries)

    def paired_exact(
        pairs: np.ndarray, positions: np.ndarray, offset: int, marked: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        # A block's rows (``pairs``, and ``marked``'s) are the batch's from ``offset`` on.
        batch_rows = pairs + offset
        found = paired_similarity(columns, batch_rows, keys.forms.subset(positions))
        if marked is None:
            return found, None
        marks = np.zeros((len(pairs), len(EVIDENCE)))
        for i in np.unique(pairs):
            at = pairs == i
            marks[at] = keys.marks(int(i) + offset, positions[at], marked[i, positions[at]])
        return found, marks

    step = max(1, _BLOCK_ENTRIES // max(n, 1))
    for start in range(0, m, step):
        block = slice(start, min(start + step, m))
        ceiling, marked = ceilings(range(start, block.stop))
        found = bounded_batch(
            meaning[block], ceiling, marked, terms.subset(np.arange(start, block.stop)),
            temperature, functools.partial(paired_exact, offset=start, marked=marked),
            keep=keep, out=(combined[block], similarity[block], weights[block]),
        )  # fmt: skip
        error[block], weighed[block] = found.error, found.weighed
    return BoundedBatch(combined, similarity, error, weights, weighed)
