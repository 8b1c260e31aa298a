"""The values of a store, one column per kind, and how attention weights blend them.

A store holds one kind of value, fixed by its first insert (or by ``value_kind=``):

* scalar: ints and floats, blended as a weighted sum (a float);
* vector: 1-D sequences of numbers of one length, blended as a weighted sum (a float64 array);
* categorical: any other JSON-serialisable value (a label); the blend is the label with the
  largest summed weight, and the per-label sums are its distribution.

Columns are row-aligned with the key index: row ``r`` of a column is the value of the key stored
in row ``r``. Inserting is two steps, ``stage`` (validate everything, may raise) then ``append`` or
``assign`` (cannot fail on bad input), so a batch that has one bad value changes nothing.
"""

from __future__ import annotations

import json
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from softdict._config import ValueKind
from softdict._errors import InvalidValueError, ValueKindError, ValueShapeError
from softdict._rows import GrowableRows

__all__ = ["Distribution", "ValueColumn", "infer_kind", "new_column", "restore_column"]

# Integers beyond 2**53 cannot round-trip through float64, which is what the blend computes in.
_MAX_EXACT_INT = 2**53


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _is_numeric_sequence(value: object) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim == 1 and value.size > 0 and np.issubdtype(value.dtype, np.number)
    if isinstance(value, (list, tuple)):
        return len(value) > 0 and all(_is_number(item) for item in value)
    return False


def infer_kind(value: object) -> ValueKind:
    """The kind of store a first value makes: scalar, vector or categorical."""
    if _is_number(value):
        return ValueKind.SCALAR
    if _is_numeric_sequence(value):
        return ValueKind.VECTOR
    return ValueKind.CATEGORICAL


class ValueColumn(ABC):
    """Values of one kind, stored by row, with the blend that attention weights give them."""

    kind: ValueKind

    @abstractmethod
    def stage(self, values: Sequence[object], keys: Sequence[str]) -> Any:
        """Validate ``values`` (for ``keys``, named in errors) and return them ready to store."""

    @abstractmethod
    def append(self, staged: Any) -> None:
        """Add staged values as new rows at the end."""

    @abstractmethod
    def assign(self, rows: np.ndarray, staged: Any) -> None:
        """Overwrite the values of existing ``rows`` with staged values."""

    @abstractmethod
    def get(self, row: int) -> Any:
        """The value stored in ``row``, as the caller gave it (a fresh copy for mutable ones)."""

    @abstractmethod
    def keep(self, rows: np.ndarray) -> None:
        """Keep only ``rows``, in that order (compaction after deletes)."""

    @abstractmethod
    def blend(self, weights: np.ndarray, rows: np.ndarray | None) -> Any:
        """Blend per query: ``weights`` (m, k) over ``rows`` (m, k), or over all rows if None.

        Returns an array of m results (scalar, vector) or a list of m labels (categorical).
        """

    @abstractmethod
    def targets(self, rows: np.ndarray) -> np.ndarray:
        """Values of ``rows`` as numbers to learn from: (n,) or (n, d) floats, or label codes (n,)
        for categorical columns (equal codes, equal labels)."""

    @abstractmethod
    def export(self) -> dict[str, Any]:
        """The column by row, as numpy arrays and JSON-able lists, for saving."""

    def describe(self) -> str:
        return self.kind.value

    def kind_error(self, key: str, value: object) -> ValueKindError:
        return ValueKindError(
            f"value for key {key!r} is {_describe(value)}, but this store holds {self.describe()} "
            f"values (fixed by its first insert); store different kinds of value in separate "
            f"SoftDicts"
        )


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"a {type(value).__name__} ({text})"


def _gather_blend(weights: np.ndarray, rows: np.ndarray | None, column: np.ndarray) -> np.ndarray:
    if rows is None:
        return weights @ column
    # (m, k) weights against the (m, k[, d]) values of each query's own rows.
    return np.einsum("mk,mk...->m...", weights, column[rows])


class ScalarColumn(ValueColumn):
    kind = ValueKind.SCALAR

    def __init__(self) -> None:
        self._numbers = GrowableRows((), np.float64)
        self._was_int = GrowableRows((), np.bool_)

    def stage(self, values: Sequence[object], keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        numbers_ = np.empty(len(values), dtype=np.float64)
        was_int = np.empty(len(values), dtype=np.bool_)
        for i, (key, value) in enumerate(zip(keys, values)):
            if not _is_number(value):
                raise self.kind_error(key, value)
            is_int = isinstance(value, numbers.Integral)
            if is_int and abs(int(value)) > _MAX_EXACT_INT:  # type: ignore[call-overload]
                raise InvalidValueError(
                    f"value for key {key!r} is the integer {value}, beyond 2**53, which a float64 "
                    f"blend cannot hold exactly; store it as a float or as a categorical label"
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

    def assign(self, rows: np.ndarray, staged: tuple[np.ndarray, np.ndarray]) -> None:
        self._numbers.view[rows] = staged[0]
        self._was_int.view[rows] = staged[1]

    def get(self, row: int) -> int | float:
        number = float(self._numbers.view[row])
        return int(number) if self._was_int.view[row] else number

    def keep(self, rows: np.ndarray) -> None:
        self._numbers.keep(rows)
        self._was_int.keep(rows)

    def blend(self, weights: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        return _gather_blend(weights, rows, self._numbers.view)

    def targets(self, rows: np.ndarray) -> np.ndarray:
        return self._numbers.view[rows]

    def export(self) -> dict[str, Any]:
        return {"values": self._numbers.view.copy(), "value_is_int": self._was_int.view.copy()}


class VectorColumn(ValueColumn):
    kind = ValueKind.VECTOR

    def __init__(self, length: int) -> None:
        self.length = length
        self._vectors = GrowableRows((length,), np.float64)

    def describe(self) -> str:
        return f"vector (length {self.length})"

    def stage(self, values: Sequence[object], keys: Sequence[str]) -> np.ndarray:
        staged = np.empty((len(values), self.length), dtype=np.float64)
        for i, (key, value) in enumerate(zip(keys, values)):
            # A numeric array of the wrong shape is a shape error, not a kind error.
            numeric_array = isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.number)
            if not (numeric_array or _is_numeric_sequence(value)):
                raise self.kind_error(key, value)
            vector = np.asarray(value, dtype=np.float64)
            if vector.shape != (self.length,):
                raise ValueShapeError(
                    f"value for key {key!r} has shape {vector.shape}, but this store holds "
                    f"vectors of length {self.length}; every vector in one store has one length"
                )
            if not np.all(np.isfinite(vector)):
                raise InvalidValueError(
                    f"value for key {key!r} contains NaN or infinity; vector values must be finite"
                )
            staged[i] = vector
        return staged

    def append(self, staged: np.ndarray) -> None:
        self._vectors.append(staged)

    def assign(self, rows: np.ndarray, staged: np.ndarray) -> None:
        self._vectors.view[rows] = staged

    def get(self, row: int) -> np.ndarray:
        return self._vectors.view[row].copy()

    def keep(self, rows: np.ndarray) -> None:
        self._vectors.keep(rows)

    def blend(self, weights: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        return _gather_blend(weights, rows, self._vectors.view)

    def targets(self, rows: np.ndarray) -> np.ndarray:
        return self._vectors.view[rows]

    def export(self) -> dict[str, Any]:
        return {"values": self._vectors.view.copy()}


def _canonical_json(value: object) -> str:
    """One text per label, so equal labels share a code whatever their dict key order."""
    return json.dumps(value, sort_keys=True, allow_nan=False, ensure_ascii=False)


class CategoricalColumn(ValueColumn):
    """Labels, stored as codes into a table of their canonical JSON.

    Labels are kept as JSON, so ``sd[key]`` returns a fresh copy that the caller may mutate, and a
    tuple comes back as a list, exactly as it will after save and load.
    """

    kind = ValueKind.CATEGORICAL

    def __init__(self) -> None:
        self._codes = GrowableRows((), np.int64)
        self._label_json: list[str] = []
        self._code_of: dict[str, int] = {}

    def stage(self, values: Sequence[object], keys: Sequence[str]) -> list[str]:
        staged = []
        for key, value in zip(keys, values):
            try:
                staged.append(_canonical_json(value))
            except (TypeError, ValueError) as exc:
                raise ValueKindError(
                    f"value for key {key!r} is {_describe(value)}, which is not a number, a vector "
                    f"or a JSON-serialisable label ({exc}); convert it to one of those"
                ) from None
        return staged

    def _codes_for(self, staged: list[str]) -> np.ndarray:
        for text in staged:
            if text not in self._code_of:
                self._code_of[text] = len(self._label_json)
                self._label_json.append(text)
        return np.fromiter((self._code_of[text] for text in staged), np.int64, len(staged))

    def append(self, staged: list[str]) -> None:
        self._codes.append(self._codes_for(staged))

    def assign(self, rows: np.ndarray, staged: list[str]) -> None:
        self._codes.view[rows] = self._codes_for(staged)

    def label(self, code: int) -> Any:
        return json.loads(self._label_json[code])

    def get(self, row: int) -> Any:
        return self.label(int(self._codes.view[row]))

    def keep(self, rows: np.ndarray) -> None:
        self._codes.keep(rows)

    def label_mass(self, weights: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """Summed weight per label code, (m, n_labels), in one bincount for the whole batch."""
        codes = self._codes.view if rows is None else self._codes.view[rows]
        codes = np.broadcast_to(codes, weights.shape)
        n_labels = len(self._label_json)
        offsets = n_labels * np.arange(weights.shape[0])[:, None]
        mass = np.bincount((codes + offsets).ravel(), weights.ravel(), weights.shape[0] * n_labels)
        return mass.reshape(weights.shape[0], n_labels)

    def blend(self, weights: np.ndarray, rows: np.ndarray | None) -> list[Any]:
        # Ties go to the label first inserted into the store: argmax picks the lowest code.
        return [self.label(int(code)) for code in self.label_mass(weights, rows).argmax(axis=1)]

    def distribution(self, mass: np.ndarray, live_codes: np.ndarray) -> Distribution:
        order = live_codes[np.argsort(-mass[live_codes], kind="stable")]
        return Distribution([(self.label(int(c)), float(mass[c])) for c in order])

    def live_codes(self, rows: np.ndarray) -> np.ndarray:
        return np.unique(self._codes.view[rows])

    def targets(self, rows: np.ndarray) -> np.ndarray:
        return self._codes.view[rows]

    def export(self) -> dict[str, Any]:
        return {"label_codes": self._codes.view.copy(), "labels": list(self._label_json)}


class Distribution(Mapping[Any, float]):
    """Probability of each label in a categorical store, most likely first.

    Labels may be unhashable JSON values (a dict, a list), so entries are found by the label's JSON
    form: ``dist[{"id": 3}]`` works. Probabilities sum to 1.
    """

    def __init__(self, pairs: list[tuple[Any, float]]) -> None:
        self._pairs = pairs
        self._index = {_canonical_json(label): i for i, (label, _) in enumerate(pairs)}

    def __getitem__(self, label: Any) -> float:
        try:
            return self._pairs[self._index[_canonical_json(label)]][1]
        except (KeyError, TypeError, ValueError):
            raise KeyError(label) from None

    def __iter__(self) -> Iterator[Any]:
        return (label for label, _ in self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def most_likely(self) -> Any:
        """The label with the largest probability."""
        return self._pairs[0][0]

    def __repr__(self) -> str:
        shown = ", ".join(f"{label!r}: {p:.3f}" for label, p in self._pairs[:8])
        more = f", ... {len(self._pairs) - 8} more" if len(self._pairs) > 8 else ""
        return f"Distribution({{{shown}{more}}})"


def restore_column(kind: ValueKind, state: dict[str, Any]) -> ValueColumn:
    """Rebuild a column from ``export`` output; the caller has checked shapes and types."""
    column: ValueColumn
    if kind is ValueKind.SCALAR:
        column = ScalarColumn()
        column.append((state["values"], state["value_is_int"]))
    elif kind is ValueKind.VECTOR:
        column = VectorColumn(state["values"].shape[1])
        column.append(state["values"])
    else:
        column = CategoricalColumn()
        column._label_json = list(state["labels"])
        column._code_of = {text: code for code, text in enumerate(column._label_json)}
        column._codes.append(state["label_codes"])
    return column


def new_column(kind: ValueKind, first_key: str, first_value: object) -> ValueColumn:
    """An empty column of ``kind``; a vector column takes its length from ``first_value``."""
    if kind is ValueKind.SCALAR:
        return ScalarColumn()
    if kind is ValueKind.CATEGORICAL:
        return CategoricalColumn()
    if not _is_numeric_sequence(first_value):
        raise ValueKindError(
            f"value for key {first_key!r} is {_describe(first_value)}, but this store was created "
            f"with value_kind='vector'; give a non-empty 1-D sequence of numbers"
        )
    return VectorColumn(len(first_value))  # type: ignore[arg-type]
