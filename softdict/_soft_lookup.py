"""SoftDict's soft lookups: ``lookup``, ``attend`` and ``nearest``, of text or of embeddings.

Each parses its arguments, encodes the queries outside the lock, and hands the embeddings to
``softdict._lookup`` under the lock. A batch of texts is looked up once per distinct text and
its answers repeated for the repeats: a table's column holds the same values many times
(benchmarks/results_table_column.md: a real column of 33,985 rows naming 243 countries mapped
41x faster on bundled-static than when every row was looked up).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

from softdict import _lookup
from softdict._arguments import check_min_score, embedding_array, query_texts
from softdict._config import check_number
from softdict._errors import EmptyStoreError
from softdict._facade import Facade
from softdict._results import Attention
from softdict._types import NO_DEFAULT, BatchValue, Label, Mask, NoDefault, Value

__all__ = ["SoftLookups"]

D = TypeVar("D")
T = TypeVar("T")


class SoftLookups(Facade):
    """Lookups by meaning and spelling: the blend of values, the attention, the nearest keys."""

    # A str is also an Iterable[str]: the str overloads come first, so a str gets one result.
    @overload
    def lookup(  # type: ignore[overload-overlap]
        self, query: str, *, min_score: float | None = None, mask: Mask = None
    ) -> Value: ...
    @overload
    def lookup(  # type: ignore[overload-overlap]
        self, query: str, *, min_score: float | None = None, default: D, mask: Mask = None
    ) -> Value | D: ...
    @overload
    def lookup(
        self, query: Iterable[str], *, min_score: float | None = None, mask: Mask = None
    ) -> BatchValue: ...
    @overload
    def lookup(
        self,
        query: Iterable[str],
        *,
        min_score: float | None = None,
        default: D,
        mask: Mask = None,
    ) -> npt.NDArray[np.float64] | list[Label | D]: ...
    def lookup(
        self,
        query: str | Iterable[str],
        *,
        min_score: float | None = None,
        default: object = NO_DEFAULT,
        mask: Mask = None,
    ) -> object:
        """The attention-weighted blend of stored values for ``query`` (a str, or a list of them).

        Returns a float (scalar store), a float64 array (vector store) or a label (categorical
        store); for a list of queries, a stacked array, or a list of labels.

        Args:
            query: one query text or a sequence of them (encoded and searched in one batch,
                each distinct text once).
            min_score: if the best key's similarity score is below this, the query has no match.
            default: returned for a query with no match; without it, no match raises.
            mask: restrict attention to these keys (an iterable of keys; absent ones are
                ignored) or to the keys a predicate ``mask(key) -> bool`` accepts, as in masked
                attention. The restriction is applied inside the index search.

        Raises:
            NoMatchError: a query had no key scoring at least ``min_score``, and no default.
            EmptyStoreError: the store has no keys, or the mask allows none.
            KeyTypeError: the mask is no iterable of keys nor a predicate, or holds an item
                that is no str (a boolean array: pass a predicate).
            ConfigError: the mask's predicate raised, or answered neither True nor False (text,
                a float or an array).
        """
        texts, single = query_texts(query)
        check_min_score(min_score)
        texts, repeats = distinct_texts(texts)
        with self._encoded(texts, lambda: self._check_lookup(default, single)) as embeddings:
            found = _lookup.lookup_values(
                self._store, embeddings, mask, texts, single, min_score, default
            )
        if repeats is None:
            return found
        if isinstance(found, np.ndarray):
            return found[repeats]  # a copy for each row
        assert isinstance(found, list)  # a batch of labels: JSON values, lists and dicts too
        return repeated(found, repeats, own_label)

    @overload
    def lookup_embeddings(
        self, queries: npt.ArrayLike, *, min_score: float | None = None, mask: Mask = None
    ) -> Value | BatchValue: ...
    @overload
    def lookup_embeddings(
        self,
        queries: npt.ArrayLike,
        *,
        min_score: float | None = None,
        default: D,
        mask: Mask = None,
    ) -> Value | BatchValue | D: ...
    def lookup_embeddings(
        self,
        queries: npt.ArrayLike,
        *,
        min_score: float | None = None,
        default: object = NO_DEFAULT,
        mask: Mask = None,
    ) -> object:
        """Like ``lookup``, for query embeddings: (n, d) gives n results, (d,) gives one."""
        check_min_score(min_score)
        array, single = self._query_array(queries)
        with self._lock, self._store.reading(spelled=False):
            self._check_lookup(default, single)
            return _lookup.lookup_values(self._store, array, mask, None, single, min_score, default)

    # A str is also an Iterable[str]: the str overloads come first, so a str gets one result.
    @overload
    def attend(self, query: str, *, mask: Mask = None) -> Attention: ...  # type: ignore[overload-overlap]
    @overload
    def attend(self, query: Iterable[str], *, mask: Mask = None) -> list[Attention]: ...
    def attend(
        self, query: str | Iterable[str], *, mask: Mask = None
    ) -> Attention | list[Attention]:
        """How ``query`` attends: an ``Attention``, or a list of them for a list of queries."""
        texts, single = query_texts(query)
        texts, repeats = distinct_texts(texts)
        with self._encoded(texts, self._require_keys) as embeddings:
            found = _lookup.attentions(self._store, embeddings, mask, texts)
        if single:
            return found[0]
        return found if repeats is None else repeated(found, repeats, own_copy)

    def attend_embeddings(
        self, queries: npt.ArrayLike, *, mask: Mask = None
    ) -> Attention | list[Attention]:
        """``attend`` for query embeddings: (n, d) gives a list of n ``Attention``, (d,) one."""
        array, single = self._query_array(queries)
        with self._lock, self._store.reading(spelled=False):
            self._require_keys()
            found = _lookup.attentions(self._store, array, mask, None)
        return found[0] if single else found

    # A str is also an Iterable[str]: the str overloads come first, so a str gets one result.
    @overload
    def nearest(  # type: ignore[overload-overlap]
        self, query: str, k: int = 3, *, mask: Mask = None
    ) -> list[tuple[str, float]]: ...
    @overload
    def nearest(
        self, query: Iterable[str], k: int = 3, *, mask: Mask = None
    ) -> list[list[tuple[str, float]]]: ...
    def nearest(
        self, query: str | Iterable[str], k: int = 3, *, mask: Mask = None
    ) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """The ``k`` keys most similar to ``query``, as (key, score) pairs, best first.

        Fewer than ``k`` pairs come back when the store (or the mask) holds fewer keys. For a
        list of queries, a list of such lists.
        """
        check_number("k", k, "a whole number >= 1", lambda v: v >= 1, whole=True)
        texts, single = query_texts(query)
        texts, repeats = distinct_texts(texts)
        with self._encoded(texts, self._require_keys) as embeddings:
            found = _lookup.nearest_keys(self._store, embeddings, int(k), mask, texts)
        if single:
            return found[0]
        return found if repeats is None else repeated(found, repeats, list)

    @contextmanager
    def _encoded(self, texts: list[str], check: Callable[[], None]) -> Iterator[np.ndarray]:
        """The query embeddings of ``texts``, with the lock held. Encoding, the slow part, runs
        outside the lock; ``check`` runs before it (to fail fast) and again under the lock
        (another thread may have written meanwhile)."""
        with self._lock:
            check()
        embeddings = self._encode_queries(texts)
        with self._lock, self._store.reading():
            check()
            yield embeddings

    def _query_array(self, queries: npt.ArrayLike) -> tuple[np.ndarray, bool]:
        array = embedding_array(queries, "query embeddings")
        single = array.ndim == 1
        return (array[None, :] if single else array), single

    def _require_keys(self) -> None:
        if not len(self._store):
            raise EmptyStoreError(
                "soft lookup on an empty SoftDict: insert keys first "
                "(sd[key] = value, sd.update(...) or sd.add_embeddings(...))"
            )

    def _check_lookup(self, default: object, single: bool) -> None:
        self._require_keys()
        column = self._store.value_column
        if not single and not isinstance(default, NoDefault) and column is not None:
            column.check_batch_default(default)  # a batch result is one array: default must fit


def distinct_texts(texts: list[str]) -> tuple[list[str], np.ndarray | None]:
    """``texts`` without repeats, in order of first appearance, and each text's position among
    them; None where no text repeats (the texts are returned as they are)."""
    positions: dict[str, int] = {}
    where = [positions.setdefault(text, len(positions)) for text in texts]
    if len(positions) == len(texts):
        return texts, None
    return list(positions), np.asarray(where, dtype=np.int64)


def own_label(label: T) -> T:
    """A copy of a label a caller could change (a JSON list or dict); the label itself where no
    caller can (a str, number, bool or None): deep copies of a column's 33,985 str labels took
    8 ms, about 9% of mapping it."""
    return copy.deepcopy(label) if isinstance(label, (list, dict)) else label


def own_copy(attention: Attention) -> Attention:
    """``attention`` with arrays, a value and a distribution of its own (a label can be a JSON
    list or dict, which a caller may change); its keys and marks (tuples of str) are shared, as
    copying a store's every key for each repeat would cost what the lookup saved."""
    own: dict[str, Any] = {}
    for field in dataclasses.fields(attention):
        value = getattr(attention, field.name)
        if isinstance(value, np.ndarray):
            own[field.name] = value.copy()
        elif field.name in ("value", "distribution"):
            own[field.name] = copy.deepcopy(value)
    return dataclasses.replace(attention, **own)


def repeated(found: Sequence[T], where: np.ndarray, copied: Callable[[T], T]) -> list[T]:
    """Each distinct text's answer at its places ``where``: the first in place, the others
    ``copied`` (an answer holds mutable arrays or lists, which a caller may change)."""
    answers: list[T] = []
    seen = [False] * len(found)
    for i in where.tolist():
        answers.append(copied(found[i]) if seen[i] else found[i])
        seen[i] = True
    return answers
