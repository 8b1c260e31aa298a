"""``Distribution``: the probability of each label, as ``Attention.distribution`` reports it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import numpy as np

from softdict._errors import short_repr
from softdict._types import Label

__all__ = ["Distribution", "canonical_json"]


def canonical_json(value: object) -> str:
    """One text per label, so equal labels share a code whatever their dict key order. A numpy
    bool, integer or float (a label read from a pandas column or an array) is the Python
    number it holds: ``np.int64(3)`` and ``3`` are one label."""
    return json.dumps(
        value, sort_keys=True, allow_nan=False, ensure_ascii=False, default=_numpy_number
    )


def _numpy_number(value: object) -> object:
    """``json.dumps``'s hook for what it cannot write: a numpy bool or real number as the Python
    one it holds; anything else (a complex number, a date, an array, an object) refused as
    ``json`` refuses it."""
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        plain = value.item()
        if not isinstance(plain, np.generic):  # np.longdouble's item() is itself: refused
            return plain
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class Distribution(Mapping[Label, float]):
    """Probability of each label in a categorical store, most likely first.

    Labels may be unhashable JSON values (a dict, a list), so entries are found by the label's JSON
    form: ``dist[{"id": 3}]`` works. Probabilities sum to 1.
    """

    def __init__(self, pairs: list[tuple[Label, float]]) -> None:
        self._pairs = pairs
        self._index = {canonical_json(label): i for i, (label, _) in enumerate(pairs)}

    def __getitem__(self, label: Label) -> float:
        try:
            return self._pairs[self._index[canonical_json(label)]][1]
        except (KeyError, TypeError, ValueError):
            raise KeyError(label) from None

    def __iter__(self) -> Iterator[Label]:
        return (label for label, _ in self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    # Mapping's == made a dict of each side, which a dict or list label cannot key (a probe).
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        try:
            theirs = {canonical_json(label): p for label, p in other.items()}
        except (TypeError, ValueError):  # a key that is no JSON label
            return False
        return len(theirs) == len(self._pairs) and all(
            theirs.get(canonical_json(label)) == p for label, p in self._pairs
        )

    def most_likely(self) -> Label:
        """The label with the largest probability."""
        return self._pairs[0][0]

    def __repr__(self) -> str:
        shown = ", ".join(f"{short_repr(label)}: {p:.3f}" for label, p in self._pairs[:8])
        more = f", ... {len(self._pairs) - 8} more" if len(self._pairs) > 8 else ""
        return f"Distribution({{{shown}{more}}})"
