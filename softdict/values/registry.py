"""Which column a ``value_kind=`` name means, which kind a first value infers, and which column
a write goes into (``write_column``, ``check_inferred_kind``: every store's writes)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from softdict._arguments import check_plug_in
from softdict._errors import ConfigError, ValueKindError, short_repr
from softdict.values.base import ValueColumn, describe_value, number_hint

__all__ = [
    "check_inferred_kind",
    "column_class",
    "infer_column_class",
    "kind_names",
    "register_value_kind",
    "write_column",
]

_KINDS: dict[str, type[ValueColumn[Any]]] = {}
# The built-in kinds a first value is tried against, most specific first; the last accepts any
# JSON value. Registered plug-in kinds are chosen by name (value_kind=), never inferred.
_INFERRED: list[type[ValueColumn[Any]]] = []
_LOCK = threading.Lock()


def register_value_kind(column: type[ValueColumn[Any]], *, inferred: bool = False) -> None:
    """Make ``value_kind=column.kind`` use ``column``. ``inferred`` (for the built-ins) also
    tries it, in registration order, on the first value of a store created without a kind.
    Registering a kind again replaces it, a built-in one too, for every store of this process.

    Raises:
        ConfigError: ``column`` is no ValueColumn subclass (an instance made a store of another
            kind) or its ``kind`` no non-empty str.
    """
    if not (isinstance(column, type) and issubclass(column, ValueColumn)):
        raise ConfigError(
            f"register_value_kind takes a ValueColumn subclass (the class itself), got "
            f"{short_repr(column, 60)}"
        )
    check_plug_in(getattr(column, "kind", None), "value kind", column)
    with _LOCK:
        _KINDS[column.kind] = column
        if inferred:
            _INFERRED.append(column)


def kind_names() -> list[str]:
    return sorted(_KINDS)


def column_class(kind: str) -> type[ValueColumn[Any]]:
    """The column registered as ``kind``; ConfigError naming the known kinds otherwise."""
    try:
        return _KINDS[kind]
    except KeyError:
        raise ConfigError(
            f"value_kind={kind!r} is not a value kind; choose one of {kind_names()}"
        ) from None


def infer_column_class(value: object) -> type[ValueColumn[Any]]:
    """The kind of store a first value makes: the first inferred kind that accepts it (the
    last, categorical, accepts any JSON value; others fail at staging with its message)."""
    for column in _INFERRED:
        if column.accepts(value):
            return column
    return _INFERRED[-1]


def write_column(
    column: ValueColumn[Any] | None,
    fixed_kind: type[ValueColumn[Any]] | None,
    items: Mapping[str, object],
) -> ValueColumn[Any]:
    """The column a write of ``items`` goes into: the store's ``column``, or for a store that
    holds no value yet, one of the kind ``value_kind=`` fixed, else of the first value's kind."""
    if column is not None:
        return column
    first_key, first_value = next(iter(items.items()))
    kind = fixed_kind if fixed_kind is not None else infer_column_class(first_value)
    # No kind took it: say what to do with a complex number, a time or an array that is no
    # vector, not that the store holds labels (it holds none). Any other value gets the label
    # column's own word on why it is no JSON label.
    hint = number_hint(first_value) or _array_hint(first_value)
    if fixed_kind is None and not kind.accepts(first_value) and hint:
        raise ValueKindError(
            f"value for key {first_key!r} is {describe_value(first_value)}, which no kind of "
            f"value takes; {hint}"
        )
    return kind.for_first_value(first_key, first_value)


def _array_hint(value: object) -> str:
    """Why a numpy array is no vector and what to do instead; "" for any other value."""
    if not isinstance(value, np.ndarray):
        return ""
    if value.ndim == 0:  # its tolist() is a number, not a list
        return (
            "a vector is a 1-D array, and this one is 0-D; for the number it holds, pass "
            "value.item()"
        )
    why = "empty" if value.ndim == 1 and not value.size else f"{value.ndim}-D"
    if value.ndim == 1 and value.size:
        why = f"of dtype {value.dtype}"
    return (
        f"a vector is a non-empty 1-D array of real numbers, and this one is {why}; to store it "
        f"as a label (a JSON list), pass value.tolist()"
    )


def check_inferred_kind(
    column: ValueColumn[Any],
    fixed_kind: type[ValueColumn[Any]] | None,
    items: Iterable[tuple[str, object]],
) -> None:
    """ValueKindError for a value of another kind than ``column``'s in a store whose kind was
    inferred: any JSON value could be a label, but a number or a vector would have made a scalar
    or vector store. (Called after the column staged the values, whose errors come first.)"""
    if fixed_kind is None:
        for key, value in items:
            if infer_column_class(value) is not type(column):
                raise column.kind_error(key, value, inferred=True)
