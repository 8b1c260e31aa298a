"""What a plug-in index backend's ``search`` and ``score_all`` answer, checked before a lookup
reads it (``IndexBackend.__init_subclass__`` wraps them in every backend defined outside
softdict; the built-in ones are tested instead, and pay nothing).

A lookup trusted the answers: a backend that ignored the mask made a masked lookup return a key
the mask left out, a duplicated id was listed and weighed twice, a NaN score made the lookup NaN,
and a 1-D answer raised numpy's AxisError (a hostile-input probe). Each is a StoreFormatError
that names the backend and what it answered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from softdict._errors import StoreFormatError

__all__ = ["checked_score_all", "checked_search"]

_CONTRACT = (
    "an index answers float scores and int ids, best first, padded with -inf and -1, each id "
    "once, held and allowed (softdict.index.IndexBackend)"
)


def _refuse(backend: Any, problem: str) -> StoreFormatError:
    return StoreFormatError(f"the index ({backend.describe()}) {problem}; {_CONTRACT}")


def _check_ids(backend: Any, ids: np.ndarray, allow: Any) -> None:
    """No id below -1 (padding), and every other one allowed, where a mask allows some."""
    if ids.dtype.kind not in "iu":
        raise _refuse(backend, f"answered ids of dtype {ids.dtype}")
    if (ids < -1).any():
        raise _refuse(backend, f"answered the id {int(ids.min())}")
    if allow is not None and not np.isin(ids[ids >= 0], allow.ids).all():
        raise _refuse(backend, "answered ids the mask leaves out")


def _check_scores(backend: Any, scores: np.ndarray) -> None:
    if scores.dtype.kind != "f":
        raise _refuse(backend, f"answered scores of dtype {scores.dtype}")
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise _refuse(backend, "answered a score that is NaN or +inf")


def checked_search(search: Callable[..., Any]) -> Callable[..., Any]:
    """``search`` with its answer checked: (m, c) scores and ids, c <= k, each id once a row."""

    @functools.wraps(search)
    def checked(
        self: Any, queries: np.ndarray, k: int, allow: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = (np.asarray(part) for part in search(self, queries, k, allow))
        m = len(queries)
        if scores.ndim != 2 or ids.shape != scores.shape or len(ids) != m or ids.shape[1] > k:
            raise _refuse(
                self, f"answered scores {scores.shape} and ids {ids.shape} to {m} queries, k={k}"
            )
        _check_ids(self, ids, allow)
        _check_scores(self, scores)
        ordered = np.sort(ids, axis=1)
        if ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any():
            raise _refuse(self, "answered an id twice to one query")
        return scores, ids

    return checked


def checked_score_all(score_all: Callable[..., Any]) -> Callable[..., Any]:
    """``score_all`` with its answer checked: (m, c) scores, and c ids, increasing."""

    @functools.wraps(score_all)
    def checked(self: Any, queries: np.ndarray, allow: Any = None) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = (np.asarray(part) for part in score_all(self, queries, allow))
        m = len(queries)
        if scores.ndim != 2 or ids.ndim != 1 or scores.shape != (m, len(ids)):
            raise _refuse(
                self, f"answered scores {scores.shape} and ids {ids.shape} to {m} queries"
            )
        _check_ids(self, ids, allow)
        if (ids < 0).any() or (np.diff(ids) <= 0).any():
            raise _refuse(self, "answered ids to score_all that are not increasing and held")
        _check_scores(self, scores)
        return scores, ids

    return checked
