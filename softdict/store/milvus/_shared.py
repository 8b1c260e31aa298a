"""What one process's handle on a store knows, while other processes write it: which keys any
store could hold, and calls tried again where another process's ``clear`` dropped the key
collection under them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Protocol, TypeVar

from softdict._arguments import is_unicode
from softdict._errors import StoreUnavailableError
from softdict.store.milvus._client import CollectionGone
from softdict.store.milvus._collection import CollectionRows

__all__ = ["again_after_a_clear", "drop_collections", "holdable"]

T = TypeVar("T")


class _Handle(Protocol):
    def _forget_shape(self) -> None: ...


def holdable(key: object) -> bool:
    """Whether ``key`` is one a store could hold: a str of valid Unicode (a lone surrogate has
    no UTF-8, which a key's id hashes). Any other is absent, as from a dict."""
    return isinstance(key, str) and is_unicode(key)


def again_after_a_clear(method: Callable[..., T]) -> Callable[..., T]:
    """``method``, tried once more where another process's clear dropped the key collection
    under it, after the handle forgets what it knew of the store's rows and shape
    (``_forget_shape``). A write that failed so wrote nothing: its collection did not exist."""

    @functools.wraps(method)
    def again(self: _Handle, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except CollectionGone:
            self._forget_shape()
            return method(self, *args, **kwargs)

    return again


def drop_collections(*collections: CollectionRows | None) -> None:
    """Drop those of ``collections`` that exist (``Store.abandon``); a server that cannot be
    reached keeps them, and the error that led here says more."""
    for rows in collections:
        if rows is not None:
            with suppress(CollectionGone, StoreUnavailableError):
                rows.drop()
