"""Typed results of a soft lookup."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from softdict._config import check_number
from softdict._errors import short_repr
from softdict._types import Value
from softdict.values.distribution import Distribution

__all__ = ["Attention"]


@dataclass(frozen=True, repr=False, eq=False)
class Attention:
    """How one query attended over the store, and the value that came out.

    Attributes:
        query: the query text, or None for a query given as an embedding.
        value: the blended value (float, float64 array, or label).
        keys: the keys scored exactly, highest weight first: every allowed key (exact
            attention; past 10,000 keys, the ``max_k`` best of them, where those read from
            compressed codes but not in their exact head carry their compressed score), the k
            nearest (top-k attention), or the head of an estimated attention.
        weights: their attention weights, non-negative. They sum to 1 over ``keys``, except in
            an estimated attention, where they sum to 1 − ``tail_mass`` (the sample stands
            for the rest), and in an exact one that lists only the best keys.
        scores: the scores the softmax ran on, before the temperature: each key's
            ``meaning_scores`` times ``meaning_factor``, plus ``score_offset``, plus what its
            ``spelling_scores`` and ``marks`` add (the store's combination,
            ``softdict.spelling.combination``); the meaning scores alone when the spelling
            channel was off.
        k: how many keys are listed (``len(keys)``).
        tail_mass: the attention mass of the allowed keys outside ``keys``: exact for exact
            attention (0 where every key is listed), the sample's estimate for an estimated
            one, None for top-k attention (which gives them nothing by its own formula;
            ``tail_bound`` says how much full attention would).
        tail_interval: (low, high), the interval on ``tail_mass`` at the store's
            ``confidence``; where scores were read from compressed codes (a large store on
            ``index="compressed"``), the interval the codes' bound makes sure of; None for
            top-k attention.
        tail_bound: an upper bound on the full attention's mass outside ``keys`` from their
            scores alone, or None where it does not hold: an approximate index (IVF, HNSW)
            can miss near keys. With the spelling channel in a large store it also assumes
            the spelling candidates are the best spelled (a key sharing no 3-gram with the
            query may be spelled more like it) and, in a Milvus store of format 3 (or where
            more than 2,048 keys could bear a mark), that no key outside them bears a mark
            (initials, letters in order) without a 3-gram in common (see
            docs/large-stores.md).
        sampled: how many keys of the rest were sampled to estimate it (0 when none were).
        value_stderr: the standard error of ``value`` due to the sample (a float, an array
            for vector values; for a label, of that label's probability); 0 when the rest
            was scored whole, None when nothing was sampled.
        distribution: for a categorical store, each label's probability; otherwise None.
        meaning_scores: the keys' similarity by embedding (cosine by default).
        spelling_scores: the keys' spelling similarity in [0, 1] (1: spelled the same, ignoring
            case, accents and punctuation), or None when the spelling channel was off (a query
            given as an embedding, or ``lexical=0``). NaN for a key whose spelling was not
            scored: it is spelled too unlike the query to add anything, or its score is too far
            below the best for its spelling to matter (``weight_error`` bounds what it could
            change; ``softdict.spelling.bounded``).
        spelling_weight: the most spelling alone adds to this query's scores, for a key spelled
            the same (0 when off).
        meaning_factor: what this query's meaning scores are multiplied by in ``scores``: 1
            under the rules; under ``learned-1`` 1 for a query of common words, less for one of
            misspelt or unknown words, codes and short forms, whose meaning the encoder guesses
            at.
        score_offset: what every key's score gets alike for this query (it changes no weight;
            it sets the level ``min_score`` compares): 0 under the rules; under ``learned-1`` a
            query of unknown words, a short one or one of several words more likely has a key
            than a common word does.
        marks: for each key, the exact marks of spelling it bears (``softdict.spelling.evidence``:
            "same", "start", "word start", "initials", "abbreviation"), or None where the
            combination weighs none (or the spelling channel was off).
        weight_error: an upper bound on the total variation distance between the attention
            and the one that scoring every key exactly would give: from spelling left unscored
            (``softdict.spelling.bounded``), or from meaning read from compressed codes (every
            key's weight, listed or not; ``softdict._compressed``), or from an index that keeps
            only lossy codes of the keys ("ivf_sq8", PQ and SQ factory strings: from the
            vectors given; ``softdict.index._code_error``; not the keys an approximate search
            missed). 0: it is that attention.
            For numbers, the value is then within ``weight_error`` times the values' range.
    """

    query: str | None
    value: Value
    keys: tuple[str, ...]
    weights: np.ndarray
    scores: np.ndarray
    k: int
    tail_mass: float | None
    distribution: Distribution | None = None
    meaning_scores: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    spelling_scores: np.ndarray | None = None
    spelling_weight: float = 0.0
    meaning_factor: float = 1.0
    score_offset: float = 0.0
    marks: tuple[tuple[str, ...], ...] | None = None
    tail_interval: tuple[float, float] | None = None
    tail_bound: float | None = None
    sampled: int = 0
    value_stderr: float | np.ndarray | None = None
    weight_error: float = 0.0

    # Compared field by field, arrays whole (NaN, a key not spelled, equal to NaN): the
    # dataclass's == raised numpy's "truth value of an array is ambiguous" (a probe).
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Attention):
            return NotImplemented
        return all(
            _same(getattr(self, field.name), getattr(other, field.name))
            for field in dataclasses.fields(self)
        )

    def top(self, n: int = 5) -> list[tuple[str, float]]:
        """The ``n`` keys with the largest weights, as (key, weight) pairs.

        Raises:
            ConfigError: ``n`` is no whole number >= 0 (-1 gave every key but the last, as a
                slice does).
        """
        check_number("n", n, "a whole number >= 0", lambda k: k >= 0, whole=True)
        return [(key, float(w)) for key, w in zip(self.keys[:n], self.weights[:n])]

    def __repr__(self) -> str:
        # Each text cut short: a key or label of a megabyte made a repr of a megabyte.
        shown = ", ".join(f"({short_repr(key)}, {w:.3f})" for key, w in self.top(3))
        more = ", ..." if len(self.keys) > 3 else ""
        value = (
            np.array2string(self.value, precision=4, threshold=6)
            if isinstance(self.value, np.ndarray)
            else short_repr(self.value)
        )
        tail = "None" if self.tail_mass is None else f"{self.tail_mass:.3g}"
        sampled = f", sampled={self.sampled}" if self.sampled else ""
        return (
            f"Attention(query={short_repr(self.query)}, value={value}, k={self.k}{sampled}, "
            f"tail_mass={tail}, top=[{shown}{more}])"
        )


def _same(a: object, b: object) -> bool:
    """Whether two fields of an Attention are equal: arrays by shape and items, NaN equal to
    NaN; tuples item by item (a value_stderr, a label, may be an array)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        floats = a.dtype.kind == "f" and b.dtype.kind == "f"
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=floats))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)
