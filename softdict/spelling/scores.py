"""How alike two texts are spelled: the similarity ``combination`` turns into a score.

* ``spelling`` in [0, 1]: the mean of two of rapidfuzz's normalised similarities on the spelling
  forms, the Indel one (what ``fuzz.ratio`` computes; the better of the forms and the
  token-sorted forms) and the optimal-string-alignment one (a swap of two letters is one edit).
  A query or key with an empty form (punctuation only) is alike to nothing: 0.

The measure (Indel + OSA) was chosen on the dev half of ``benchmarks/matching.py`` (typos and
aliases of real names), with the hand-set rule (``combination``'s rule-1), holding the meaning
measurements of ``benchmarks/matching_design.py`` where they were with meaning alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from softdict.spelling.text import SpellingQueries

__all__ = ["KeyForms", "spelling_similarity"]

# rapidfuzz's threads pay off only on large blocks of pairs (measured: one query against 10^4
# keys is faster on one thread).
_PARALLEL_PAIRS = 200_000


@dataclass(frozen=True)
class KeyForms:
    """Keys' spelling forms, as the index hands them to ``spelling_similarity``.

    Attributes:
        forms: (n,) object array of forms.
        sorted_forms: their token-sorted forms, or None where every key is one word (then
            they are the forms).
        empty: (n,) bool, which forms are empty, or None where none is.
    """

    forms: np.ndarray
    sorted_forms: np.ndarray | None
    empty: np.ndarray | None

    def __len__(self) -> int:
        return len(self.forms)

    def subset(self, positions: np.ndarray) -> KeyForms:
        """The forms at ``positions``."""
        return KeyForms(
            self.forms[positions],
            None if self.sorted_forms is None else self.sorted_forms[positions],
            None if self.empty is None else self.empty[positions],
        )


def spelling_similarity(queries: SpellingQueries, keys: KeyForms) -> np.ndarray:
    """The spelling similarity (m, n) float32 in [0, 1] of each query with each key."""
    from rapidfuzz import process
    from rapidfuzz.distance import OSA, Indel

    m, n = len(queries), len(keys)
    if not m or not n:
        return np.zeros((m, n), dtype=np.float32)
    workers = -1 if m * n >= _PARALLEL_PAIRS else 1

    def scores(scorer: Any, query_texts: list[str], key_texts: np.ndarray) -> np.ndarray:
        return process.cdist(
            query_texts, key_texts, scorer=scorer, dtype=np.float32, workers=workers
        )

    indel = scores(Indel.normalized_similarity, queries.forms, keys.forms)
    if keys.sorted_forms is not None or queries.sorted_forms != queries.forms:
        sorted_keys = keys.forms if keys.sorted_forms is None else keys.sorted_forms
        indel = np.maximum(
            indel, scores(Indel.normalized_similarity, queries.sorted_forms, sorted_keys)
        )
    similarity = (indel + scores(OSA.normalized_similarity, queries.forms, keys.forms)) / 2
    # Two empty forms are "equal" to rapidfuzz; to a reader they share no letter.
    similarity[np.array([not form for form in queries.forms]), :] = 0.0
    if keys.empty is not None:
        similarity[:, keys.empty] = 0.0
    return similarity
