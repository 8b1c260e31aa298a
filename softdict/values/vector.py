"""Vector values: 1-D sequences of numbers of one length per store, blended as a weighted sum.

The vectors are held component by component (``GrowableColumns``: each component of every key
contiguous), so a blend over every key is one matrix-vector product per component: held key by
key, an odd length such as 13 sent BLAS down a slow path (1.9 ms for 10^5 keys against 0.2 ms).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from softdict._errors import InvalidValueError, ValueKindError, ValueShapeError
from softdict._files import FileReader, StoreFiles
from softdict._rows import GrowableColumns, every_slot
from softdict._types import BatchValue, Value
from softdict.values.base import (
    MAX_EXACT_INT,
    LossKind,
    ValueColumn,
    array_rounding,
    batch_default_error,
    describe_value,
    float64_rounding,
    is_number,
    number_hint,
    real_dtype,
)

__all__ = ["VectorColumn"]


def is_numeric_sequence(value: object) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim == 1 and value.size > 0 and real_dtype(value.dtype)
    if isinstance(value, (list, tuple)):
        return len(value) > 0 and all(is_number(item) for item in value)
    return False


def _rounding(value: object, as_floats: np.ndarray) -> str | None:
    """``float64_rounding`` of a vector's numbers (an array's, or a list's items'), given them
    as float64 (``as_floats``): only a list with an item beyond 2**53 there, or of a type other
    than float and int, is looked at item by item (staging runs this for every value)."""
    if isinstance(value, np.ndarray):
        return array_rounding(value)
    items: Sequence[object] = value if isinstance(value, (list, tuple)) else ()
    plain = set(map(type, items)) <= {float, int}
    if plain and not (as_floats.size and np.abs(as_floats).max() >= MAX_EXACT_INT):
        return None
    return next(filter(None, map(float64_rounding, items)), None)


class VectorColumn(ValueColumn[np.ndarray]):
    kind = "vector"
    loss = LossKind.SQUARED_ERROR

    def __init__(self, length: int) -> None:
        self.length = length
        self._vectors = GrowableColumns(length, np.float64)  # (length, n)

    @classmethod
    def accepts(cls, value: object) -> bool:
        return is_numeric_sequence(value)

    @classmethod
    def for_first_value(cls, key: str, value: object) -> VectorColumn:
        if not is_numeric_sequence(value):
            hint = number_hint(value)
            raise ValueKindError(
                f"value for key {key!r} is {describe_value(value)}, but this store was created "
                f"with value_kind='vector'; give a non-empty 1-D sequence of numbers"
                + (f" ({hint})" if hint else "")
            )
        return cls(len(value))  # type: ignore[arg-type]

    def describe(self) -> str:
        return f"vector (length {self.length})"

    def __len__(self) -> int:
        return len(self._vectors)

    def stage(self, values: Sequence[object], keys: Sequence[str]) -> np.ndarray:
        at_once = self._lists_at_once(values)
        if at_once is not None:
            return at_once
        staged = np.empty((len(values), self.length), dtype=np.float64)
        for i, (key, value) in enumerate(zip(keys, values)):
            # A numeric array of the wrong shape is a shape error, not a kind error.
            numeric_array = isinstance(value, np.ndarray) and real_dtype(value.dtype)
            if not (numeric_array or is_numeric_sequence(value)):
                raise self.kind_error(key, value)
            if np.ma.is_masked(value):  # np.asarray keeps the data under the mask
                raise InvalidValueError(
                    f"value for key {key!r} is a masked array with masked (missing) entries; "
                    f"vector values must be whole: fill them (value.filled(...)) first"
                )
            try:
                vector = np.asarray(value, dtype=np.float64)
            except OverflowError:
                raise InvalidValueError(
                    f"value for key {key!r} holds an integer beyond a float's range; vector "
                    f"values are stored as float64"
                ) from None
            if vector.shape != (self.length,):
                raise ValueShapeError(
                    f"value for key {key!r} has shape {vector.shape}, but this store holds "
                    f"vectors of length {self.length}; every vector in one store has one length"
                )
            if not np.all(np.isfinite(vector)):
                raise InvalidValueError(
                    f"value for key {key!r} contains NaN or infinity; vector values must be finite"
                )
            rounding = _rounding(value, vector)
            if rounding:
                raise InvalidValueError(
                    f"value for key {key!r} holds {rounding}; convert it to floats first if "
                    f"rounding is what you want"
                )
            staged[i] = vector
        return staged

    def _lists_at_once(self, values: Sequence[object]) -> np.ndarray | None:
        """``values`` as one array where each is a list of this length of finite ints and
        floats (as JSON reads them back: a Milvus store's lookup stages a few thousand), which
        passes the checks below; None: check them one by one, which says what is wrong."""
        if set(map(type, values)) != {list}:
            return None
        lists: Sequence[list[object]] = values  # type: ignore[assignment]  # checked above
        length = self.length
        if set(map(len, lists)) != {length}:
            return None
        if not set(map(type, chain.from_iterable(lists))) <= {int, float}:
            return None
        try:  # (fromiter over the items is twice as fast as np.array over the lists)
            items = chain.from_iterable(lists)
            staged = np.fromiter(items, np.float64, len(lists) * length).reshape(-1, length)
        except OverflowError:  # an int beyond a float's range
            return None
        # An int float64 would round (past 2**53) is refused one by one, which says so.
        plain = np.isfinite(staged).all() and not np.abs(staged).max(initial=0) >= MAX_EXACT_INT
        return staged if plain else None

    def append(self, staged: np.ndarray) -> None:
        self._vectors.append(staged)

    def assign(self, slots: np.ndarray, staged: np.ndarray) -> None:
        self._vectors.view[:, slots] = staged.T

    def get(self, slot: int) -> Value:
        return self._vectors.view[:, slot].copy()

    def keep(self, slots: np.ndarray) -> None:
        self._vectors.keep(slots)

    def blend(self, weights: np.ndarray, slots: np.ndarray) -> BatchValue:
        components = self._vectors.view
        weights = np.asarray(weights, dtype=np.float64)
        if slots.ndim == 2:  # each query its own slots
            return np.einsum("mk,dmk->md", weights, components[:, slots])
        every = every_slot(slots, components.shape[1])
        return (components @ weights.T if every else components[:, slots] @ weights.T).T

    def check_batch_default(self, default: object) -> None:
        value: Any = default  # anything: is_numeric_sequence says whether it is a vector
        expected = f"a vector of length {self.length}"
        if not is_numeric_sequence(value) or len(value) != self.length:
            raise batch_default_error(expected, default)
        with np.errstate(over="ignore", invalid="ignore"):
            as_floats = np.asarray(value, dtype=np.float64)
        rounding = _rounding(value, as_floats)
        if rounding:
            raise batch_default_error(expected, default, rounding)

    def calibration_values(self, slots: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self._vectors.view[:, slots].T)

    def dump(self, slots: np.ndarray) -> StoreFiles:
        return {"values.npy": np.ascontiguousarray(self._vectors.view[:, slots].T)}

    @classmethod
    def restore(cls, files: FileReader, n: int) -> VectorColumn:
        values = files.finite_npy("values.npy", np.float64, (n, None))
        if values.shape[1] == 0:
            raise files.error("values.npy", "holds vectors of length 0")
        column = cls(values.shape[1])
        column.append(values)
        return column
