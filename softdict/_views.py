"""The views of ``SoftDict``'s exact mapping, and its equality, as a dict's but safe under
threads: ``items()`` and ``values()`` walk a snapshot of the keys (as iterating a SoftDict does)
and skip a key another thread deleted since, where the ``Mapping`` mixin's views fetched it
and raised ``KeyError``; equality compares a vector value as a whole, where the mixin compared
its elements and raised. Like a dict's views (and unlike the mixin's), they support
``reversed()``: the keys in insertion order, reversed.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Reversible, ValuesView
from typing import TypeVar, cast

import numpy as np

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["LiveItems", "LiveKeys", "LiveValues", "same_items"]


def _newest_first(mapping: Mapping[K, V]) -> Iterator[K]:
    """The keys of a SoftDict, newest first (a ``Mapping`` need not be reversible; it is)."""
    return reversed(cast("Reversible[K]", mapping))


class LiveKeys(KeysView[K]):
    """``SoftDict.keys()``: the mixin's view, reversible as a dict's."""

    def __init__(self, mapping: Mapping[K, V]) -> None:
        super().__init__(mapping)
        self._of = mapping

    def __reversed__(self) -> Iterator[K]:
        return _newest_first(self._of)


class LiveItems(ItemsView[K, V]):
    """``SoftDict.items()``: the items of a snapshot of the keys, those deleted since skipped."""

    def __init__(self, mapping: Mapping[K, V]) -> None:
        super().__init__(mapping)
        self._of = mapping

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return self._present(self._of)

    def __reversed__(self) -> Iterator[tuple[K, V]]:
        return self._present(_newest_first(self._of))

    def _present(self, keys: Iterable[K]) -> Iterator[tuple[K, V]]:
        for key in keys:
            try:
                value = self._of[key]
            except KeyError:  # deleted by another thread since the keys were listed
                continue
            yield key, value


class LiveValues(ValuesView[V]):
    """``SoftDict.values()``: as ``LiveItems``, the values alone."""

    def __init__(self, mapping: Mapping[K, V]) -> None:
        super().__init__(mapping)
        self._of: Mapping[K, V] = mapping

    def __iter__(self) -> Iterator[V]:
        for _, value in LiveItems(self._of):
            yield value

    def __reversed__(self) -> Iterator[V]:
        for _, value in reversed(LiveItems(self._of)):
            yield value


def same_items(mine: Mapping[str, object], other: Mapping[object, object]) -> bool:
    """Whether two mappings hold the same keys, each with an equal value (arrays equal whole)."""
    if len(mine) != len(other):
        return False
    for key, value in LiveItems(mine):
        if key not in other:
            return False
        theirs = other[key]
        if isinstance(value, np.ndarray) or isinstance(theirs, np.ndarray):
            try:
                other_array = np.asarray(theirs)
            except (ValueError, TypeError):  # ragged ([1.0, [2.0]]): no array, so not equal
                return False
            if not np.array_equal(np.asarray(value), other_array):
                return False
        elif value != theirs:
            return False
    return True
