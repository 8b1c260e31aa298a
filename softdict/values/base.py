"""The value-column protocol: one store's values, stored by slot, and how attention blends them.

A store holds one kind of value, fixed by its first insert (or by ``value_kind=``). A column is
slot-aligned with the store: slot ``s`` of the column is the value of the key in the store's
slot ``s``. Inserting is two steps, ``stage`` (validate everything, may raise) then ``append`` or
``assign`` (cannot fail on bad input), so a batch that has one bad value changes nothing.
"""

from __future__ import annotations

import datetime
import fractions
import math
import numbers
import reprlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from softdict._errors import ValueKindError, ValueShapeError, short_repr
from softdict._files import FileReader, StoreFiles
from softdict._rows import every_slot
from softdict._types import BatchValue, Value
from softdict.values.distribution import Distribution

__all__ = [
    "LossKind",
    "Staged",
    "ValueColumn",
    "batch_default_error",
    "describe_value",
    "is_number",
    "number_hint",
    "real_dtype",
]


class LossKind(str, Enum):
    """How ``calibrate`` judges a column's leave-one-out predictions."""

    SQUARED_ERROR = "squared_error"  # numbers: (n,) or (n, d) floats, blended
    LABEL_LIKELIHOOD = "label_likelihood"  # label codes: the mass on each key's own label


def is_number(value: object) -> bool:
    """An int or float (numpy's too), not a bool nor a timedelta64."""
    if type(value) in (float, int):  # the common case, without the ABC's isinstance (4x slower)
        return True
    # numpy registers timedelta64 as an integer, but float() of one drops its unit.
    excluded = (bool, np.bool_, np.timedelta64)
    return isinstance(value, numbers.Real) and not isinstance(value, excluded)


# Integers beyond 2**53 cannot round-trip through float64, which numbers are stored and blended in.
MAX_EXACT_INT = 2**53


def float64_rounding(value: object) -> str | None:
    """Why the number ``value`` (``is_number``) cannot be kept as a float64, or None where it
    can (or is not finite, which the caller refuses): an integer beyond 2**53 (past which
    float64 skips integers; scalar values always refused them, as their saved files do), a
    longdouble or fraction float64 can only round. They were stored rounded, without a word."""
    kind = type(value)
    if kind is float:  # the common cases first: staging runs this for every value
        return None
    if kind is int or isinstance(value, numbers.Integral):
        big = abs(int(value)) > MAX_EXACT_INT  # type: ignore[call-overload]
        if not big:
            return None
        shown = short_repr(int(value))  # type: ignore[call-overload]  # "an integer of N digits"
        named = shown if shown.startswith("an integer") else f"the integer {shown}"
        return f"{named}, beyond 2**53, where float64 stops holding every integer"
    if isinstance(value, (np.float64, np.float32, np.float16)):
        return None
    try:
        rounded = float(value)  # type: ignore[arg-type]
    except OverflowError:
        return None  # beyond float64's range: the caller says so
    if not math.isfinite(rounded):
        return None
    if isinstance(value, np.floating):  # longdouble
        exact = bool(np.longdouble(rounded) == value)
    else:  # a Fraction, or another Rational
        exact = not isinstance(value, numbers.Rational) or fractions.Fraction(rounded) == value
    return None if exact else f"{describe_value(value)}, which a float64 can only round"


def array_rounding(array: np.ndarray) -> str | None:
    """``float64_rounding`` for a real array: integers beyond 2**53, or finite longdoubles that
    do not round-trip through float64."""
    if not array.size:
        return None
    # int() first: -array.min() wraps around for unsigned integers and for int64's least.
    if array.dtype.kind in "iu" and max(int(array.max()), -int(array.min())) > MAX_EXACT_INT:
        return "an integer beyond 2**53, where float64 stops holding every integer"
    if array.dtype.kind == "f" and array.dtype.itemsize > 8:
        with np.errstate(over="ignore"):
            rounded = array.astype(np.float64)
        finite = np.isfinite(rounded)
        if not np.array_equal(rounded[finite].astype(array.dtype), array[finite]):
            return "a longdouble that a float64 can only round"
    return None


def real_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether an array of ``dtype`` holds numbers as ``is_number`` counts them: integers and
    floats, not bools, complex numbers or timedelta64 (``np.number`` counts the last two)."""
    return dtype.kind in "iuf"


# What to do with a value numpy would cast to a float while dropping part of it, by the kind of
# dtype (numpy's letters) it has or would have.
_NUMBER_HINTS = {
    "c": "complex numbers are not stored (a cast to float would drop the imaginary part): "
    "store the real and imaginary parts as a vector, or abs(value)",
    "m": "durations are not stored as numbers (a cast would drop their unit): convert it to a "
    "float of seconds (value / np.timedelta64(1, 's'), or value.total_seconds())",
    "M": "dates and times are not numbers: convert it to a float (such as seconds since the "
    "epoch), or store it as a label (a str)",
}


def number_hint(value: object) -> str:
    """What to do instead with a complex number, a duration or a time (or a list or array that
    holds one), which are not stored as numbers; "" for any other value."""
    for item in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(item, (np.ndarray, np.generic)):
            kind = item.dtype.kind
        elif isinstance(item, numbers.Complex) and not isinstance(item, numbers.Real):
            kind = "c"
        elif isinstance(item, datetime.timedelta):
            kind = "m"
        elif isinstance(item, (datetime.date, datetime.time)):
            kind = "M"
        else:
            continue
        if kind in _NUMBER_HINTS:
            return _NUMBER_HINTS[kind]
    return ""


def describe_value(value: object) -> str:
    """The type and a short repr of ``value`` for a message (reprlib: safe however deep)."""
    try:
        text = reprlib.repr(value)
    except Exception:  # a message must not fail: an int past Python's 4,300-digit str limit
        text = "..."
    if len(text) > 60:
        text = text[:57] + "..."
    return f"a {type(value).__name__} ({text})"


# The form a column's values take between ``stage`` (which validates them) and ``append`` or
# ``assign`` (which store them): each kind chooses its own.
Staged = TypeVar("Staged")


class ValueColumn(ABC, Generic[Staged]):
    """Values of one kind by slot, with the blend that attention weights give them."""

    kind: ClassVar[str]  # the name ``value_kind=`` takes
    loss: ClassVar[LossKind]

    @classmethod
    @abstractmethod
    def accepts(cls, value: object) -> bool:
        """Whether ``value`` is of this kind: a first value it accepts makes a store of it."""

    @classmethod
    def for_first_value(cls, key: str, value: object) -> ValueColumn[Staged]:
        """An empty column for a store whose first value is ``value`` (for ``key``)."""
        return cls()

    def describe(self) -> str:
        return self.kind

    @abstractmethod
    def __len__(self) -> int:
        """Slots held, deleted ones included until the store compacts them."""

    @abstractmethod
    def stage(self, values: Sequence[object], keys: Sequence[str]) -> Staged:
        """Validate ``values`` (for ``keys``, named in errors) and return them ready to store."""

    @abstractmethod
    def append(self, staged: Staged) -> None:
        """Add staged values as new slots at the end."""

    @abstractmethod
    def assign(self, slots: np.ndarray, staged: Staged) -> None:
        """Overwrite the values of existing ``slots`` with staged values."""

    @abstractmethod
    def get(self, slot: int) -> Value:
        """The value in ``slot``, as the caller gave it (a fresh copy for mutable ones)."""

    @abstractmethod
    def keep(self, slots: np.ndarray) -> None:
        """Keep only ``slots``, in that order (compaction after deletes)."""

    @abstractmethod
    def blend(self, weights: np.ndarray, slots: np.ndarray) -> BatchValue:
        """Blend per query: ``weights`` (m, c) over ``slots`` (c,) shared by every query, or
        (m, c) per query. Returns m results: an array, or a list of labels."""

    def result(self, blended: BatchValue, i: int) -> Value:
        """Query ``i``'s result from ``blend``'s output, as ``lookup`` returns it."""
        return blended[i]

    def explain(
        self, weights: np.ndarray, slots: np.ndarray, present: Callable[[], np.ndarray]
    ) -> list[Distribution | None]:
        """Per query, how its weight splits over values (``Attention.distribution``); None where
        the blend says it all. ``present()`` gives the slots of every stored key."""
        return [None] * len(weights)

    def check_batch_default(self, default: object) -> None:
        """Raise ValueShapeError unless a batch result can hold ``default`` for a query with no
        match (a batch of numbers is one array). A list of labels holds anything."""

    def fill(self, blended: BatchValue, misses: np.ndarray, default: object) -> BatchValue:
        """``blended`` with ``default`` for each query in ``misses`` (checked by
        ``check_batch_default``)."""
        filled: Any = blended  # an array or a list: either takes an item by index
        for i in np.flatnonzero(misses):
            filled[int(i)] = default
        return blended

    @abstractmethod
    def calibration_values(self, slots: np.ndarray) -> np.ndarray:
        """Values of ``slots`` as ``loss`` counts them: floats (n,) or (n, d), or label codes."""

    @abstractmethod
    def dump(self, slots: np.ndarray) -> StoreFiles:
        """The values of ``slots``, in that order, as files (arrays and JSON lists)."""

    @classmethod
    @abstractmethod
    def restore(cls, files: FileReader, n: int) -> ValueColumn[Staged]:
        """A column of ``n`` slots from ``dump``'s files; StoreFormatError if they do not fit."""

    def kind_error(self, key: str, value: object, *, inferred: bool = False) -> ValueKindError:
        """The error for a ``value`` of another kind than this column's; ``inferred``: the kind
        was taken from the store's first value (no ``value_kind=``), and ``value`` is one that
        column accepts, but that would have made another kind of store."""
        advice = number_hint(value) or "store different kinds of value in separate SoftDicts"
        if inferred and self.kind == "categorical":
            advice = (
                "a store whose first value was a label takes no numbers or vectors, which would "
                "have made another kind of store; to keep numbers as labels too, make it with "
                "value_kind='categorical'"
            )
        elif isinstance(value, np.ndarray) and self.kind == "categorical":
            advice = _array_as_label(value)
        fixed = "its first insert" if inferred else "its first insert, or by value_kind="
        return ValueKindError(
            f"value for key {key!r} is {describe_value(value)}, but this store holds "
            f"{self.describe()} values (fixed by {fixed}); {advice}"
        )


def _array_as_label(value: np.ndarray) -> str:
    """How to store a numpy array as a label. Its number or its list of numbers is taken only
    by a store made with value_kind='categorical': one whose kind came from a first label
    refuses them, which would have made another kind of store (``kind_error``)."""
    if value.ndim == 0 and value.dtype.kind in "biuf":
        return (
            "to store the number it holds as a label, pass value.item() to a store made with "
            "value_kind='categorical'"
        )
    if value.ndim == 0:
        return "to store what it holds as a label, pass value.item()"
    if value.ndim == 1 and value.dtype.kind in "biuf":
        return (
            "to store it as a label (a JSON list), pass value.tolist() to a store made with "
            "value_kind='categorical'"
        )
    return "to store the array as a label (a JSON list), pass value.tolist()"


def batch_default_error(
    expected: str, default: object, rounding: str | None = None
) -> ValueShapeError:
    """The error for a ``default`` that a batch result (one array) cannot hold, or (``rounding``:
    why) would hold rounded."""
    why = (
        f"default must be {expected}; got {short_repr(default, 60)}"
        if rounding is None
        else f"its float64 array would round default, {rounding}"
    )
    return ValueShapeError(
        f"a batch lookup returns one array, so {why}. To get {short_repr(default, 20)} back, "
        f"look the queries up one at a time"
    )


def gather_blend(weights: np.ndarray, slots: np.ndarray, column: np.ndarray) -> np.ndarray:
    """Weighted sums of ``column`` rows: shared (c,) slots or per-query (m, c) slots."""
    if slots.ndim == 1:
        # Every stored key in slot order (the exact path, no deletes pending): no gather needed.
        every = every_slot(slots, len(column))
        return np.asarray(weights @ (column if every else column[slots]))
    # (m, k) weights against the (m, k[, d]) values of each query's own slots.
    return np.einsum("mk,mk...->m...", weights, column[slots])
