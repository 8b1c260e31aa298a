"""Which column a ``value_kind=`` name means, and which kind a first value infers."""

from __future__ import annotations

import threading
from typing import Any

from softdict._errors import ConfigError
from softdict.values.base import ValueColumn

__all__ = ["column_class", "infer_column_class", "kind_names", "register_value_kind"]

_KINDS: dict[str, type[ValueColumn[Any]]] = {}
# The built-in kinds a first value is tried against, most specific first; the last accepts any
# JSON value. Registered plug-in kinds are chosen by name (value_kind=), never inferred.
_INFERRED: list[type[ValueColumn[Any]]] = []
_LOCK = threading.Lock()


def register_value_kind(column: type[ValueColumn[Any]], *, inferred: bool = False) -> None:
    """Make ``value_kind=column.kind`` use ``column``. ``inferred`` (for the built-ins) also
    tries it, in registration order, on the first value of a store created without a kind."""
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
