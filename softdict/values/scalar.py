"""Scalar values: ints and floats, blended as a weighted sum (a float)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from softdict._errors import InvalidValueError
from softdict._files import FileReader, StoreFiles
from softdict._rows import GrowableRows
from softdict._types import BatchValue, Value
from softdict.values.base import (
    MAX_EXACT_INT,
    LossKind,
    ValueColumn,
    batch_default_error,
    describe_value,
    float64_rounding,
    gather_blend,
    is_number,
)

__all__ = ["ScalarColumn"]


class ScalarColumn(ValueColumn[tuple[np.ndarray, np.ndarray]]):
    kind = "scalar"
    loss = LossKind.SQUARED_ERROR

    def __init__(self) -> None:
        self._numbers = GrowableRows((), np.float64)
        self._was_int = GrowableRows((), np.bool_)

    @classmethod
    def accepts(cls, value: object) -> bool:
        return is_number(value)

    def __len__(self) -> int:
        return len(self._numbers)

    def stage(self, values: Sequence[object], keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        numbers_ = np.empty(len(values), dtype=np.float64)
        was_int = np.empty(len(values), dtype=np.bool_)
        for i, (key, value) in enumerate(zip(keys, values)):
            if not is_number(value):
                raise self.kind_error(key, value)
            kind = type(value)
            is_int = kind is int or (kind is not float and isinstance(value, numbers.Integral))
            rounding = float64_rounding(value)
            if rounding:
                raise InvalidValueError(
                    f"value for key {key!r} is {rounding}; store it as a float (float(value)), "
                    f"which rounds it, or as a categorical label, which keeps it"
                )
            if not _fits_a_float(value):  # a Fraction or an integral beyond float64's range
                raise InvalidValueError(
                    f"value for key {key!r} is {describe_value(value)}, beyond the largest float64 "
                    f"(about 1.8e308); store a smaller number, or the number as a label"
                )
            number = float(value)  # type: ignore[arg-type]
            if not math.isfinite(number):
                raise InvalidValueError(
                    f"value for key {key!r} is {number}; values must be finite numbers "
                    f"(replace NaN and infinity before inserting)"
                )
            numbers_[i] = number
            was_int[i] = is_int
        return numbers_, was_int

    def append(self, staged: tuple[np.ndarray, np.ndarray]) -> None:
        self._numbers.append(staged[0])
        self._was_int.append(staged[1])

    def assign(self, slots: np.ndarray, staged: tuple[np.ndarray, np.ndarray]) -> None:
        self._numbers.view[slots] = staged[0]
        self._was_int.view[slots] = staged[1]

    def get(self, slot: int) -> Value:
        number = float(self._numbers.view[slot])
        return int(number) if self._was_int.view[slot] else number

    def keep(self, slots: np.ndarray) -> None:
        self._numbers.keep(slots)
        self._was_int.keep(slots)

    def blend(self, weights: np.ndarray, slots: np.ndarray) -> BatchValue:
        return gather_blend(weights, slots, self._numbers.view)

    def result(self, blended: BatchValue, i: int) -> Value:
        return float(blended[i])  # type: ignore[arg-type]

    def check_batch_default(self, default: object) -> None:
        expected = "a number (float('nan') marks a miss)"
        if not is_number(default) or not _fits_a_float(default):
            raise batch_default_error(expected, default)
        rounding = float64_rounding(default)  # a batch's result is one float64 array
        if rounding:
            raise batch_default_error(expected, default, rounding)

    def calibration_values(self, slots: np.ndarray) -> np.ndarray:
        return self._numbers.view[slots]

    def dump(self, slots: np.ndarray) -> StoreFiles:
        return {
            "values.npy": self._numbers.view[slots],
            "value_is_int.npy": self._was_int.view[slots],
        }

    @classmethod
    def restore(cls, files: FileReader, n: int) -> ScalarColumn:
        values = files.finite_npy("values.npy", np.float64, (n,))
        was_int = files.npy("value_is_int.npy", np.bool_, (n,))
        flagged = values[was_int]
        if np.any(flagged != np.round(flagged)) or np.any(np.abs(flagged) > MAX_EXACT_INT):
            raise files.error(
                "value_is_int.npy",
                "flags values as integers that are not whole numbers, or beyond 2**53",
            )
        column = cls()
        column.append((values, was_int))
        return column


def _fits_a_float(number: object) -> bool:
    """Whether a number converts to a float64 (10**400 does not: OverflowError; a longdouble
    past float64's range converts to infinity, with no more than a RuntimeWarning)."""
    try:
        with np.errstate(over="ignore"):
            converted = float(number)  # type: ignore[arg-type]
    except OverflowError:
        return False
    if not math.isfinite(converted):  # an infinity or NaN given as such fits; a finite one not
        return not np.isfinite(number)  # type: ignore[call-overload]
    return True
