"""Stores: everything one SoftDict holds, behind the ``Store`` protocol (in ``base``).

``MemoryStore`` (in ``memory``) keeps keys, values and vectors in this process; it is the
default, ``store="memory"``. A store that lives elsewhere (a vector database shared by several
processes) is one package implementing ``Store`` plus one call to ``register_store`` for its
URI scheme; ``SoftDict(store="scheme:location")`` then opens it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from softdict._config import SoftDictConfig
from softdict._errors import ConfigError
from softdict.store.base import StagedWrite, Store, StoreState
from softdict.store.memory import MemoryStore

__all__ = [
    "MemoryStore",
    "StagedWrite",
    "Store",
    "StoreState",
    "open_store",
    "register_store",
    "store_schemes",
]

# scheme -> open(location, config): "memory" needs no location.
_SCHEMES: dict[str, Callable[[str, SoftDictConfig], Store]] = {}
_LOCK = threading.Lock()


def register_store(scheme: str, open_store: Callable[[str, SoftDictConfig], Store]) -> None:
    """Make ``store="scheme:location"`` open ``open_store(location, config)``."""
    with _LOCK:
        _SCHEMES[scheme] = open_store


def store_schemes() -> list[str]:
    return sorted(_SCHEMES)


def open_store(uri: str, config: SoftDictConfig) -> Store:
    """The store ``uri`` ("scheme" or "scheme:location") names, with these options."""
    if not isinstance(uri, str):
        raise ConfigError(f"store must be a string such as 'memory', got {type(uri).__name__}")
    scheme, _, location = uri.partition(":")
    if scheme not in _SCHEMES:
        raise ConfigError(
            f"store={uri!r} names no known kind of store; the known schemes are "
            f"{store_schemes()} (e.g. store='memory')"
        )
    return _SCHEMES[scheme](location, config)


register_store("memory", lambda location, config: MemoryStore(config))
