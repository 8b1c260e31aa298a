"""Stores: everything one SoftDict holds, behind the ``Store`` protocol (in ``base``).

``MemoryStore`` (in ``memory``) keeps keys, values and vectors in this process; it is the
default, ``store="memory"``. A store that lives elsewhere (a vector database shared by several
processes) is one package implementing ``Store`` plus one call to ``register_store`` for its
URI scheme; ``SoftDict(store="scheme:location")`` then opens it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from softdict._arguments import check_plug_in
from softdict._config import SoftDictConfig
from softdict._errors import ConfigError
from softdict.store.base import StagedWrite, Store, StoreState
from softdict.store.copying import copy_into
from softdict.store.memory import MemoryStore

__all__ = [
    "MemoryStore",
    "StagedWrite",
    "Store",
    "StoreState",
    "copy_into",
    "open_store",
    "register_store",
    "store_schemes",
]

# scheme -> open(location, config, **options): "memory" needs no location and takes no options.
_SCHEMES: dict[str, Callable[..., Store]] = {}
_LOCK = threading.Lock()


def register_store(scheme: str, open_store: Callable[..., Store]) -> None:
    """Make ``store="scheme:location"`` open ``open_store(location, config, **options)``, where
    ``options`` are the store options given (``collection=``), if any. Registering a scheme again
    replaces it.

    Raises:
        ConfigError: ``scheme`` is no non-empty str without ":", or ``open_store`` is not
            callable.
    """
    check_plug_in(scheme, "store scheme", open_store, forbidden=":")
    with _LOCK:
        _SCHEMES[scheme] = open_store


def store_schemes() -> list[str]:
    return sorted(_SCHEMES)


def open_store(uri: str, config: SoftDictConfig, **options: object) -> Store:
    """The store ``uri`` ("scheme" or "scheme:location") names, with these options, and the
    store options that were given (None ones dropped)."""
    if not isinstance(uri, str):
        raise ConfigError(f"store must be a string such as 'memory', got {type(uri).__name__}")
    scheme, _, location = uri.partition(":")
    if scheme not in _SCHEMES:
        # A folder a store was saved to is loaded, not opened: say so to whoever tried.
        folder = "/" in uri or "\\" in uri or uri.startswith(".") or os.path.isdir(uri)
        hint = "; a store saved to a folder is read with SoftDict.load(path)" if folder else ""
        raise ConfigError(
            f"store={uri!r} names no known kind of store; the known schemes are "
            f"{store_schemes()} (e.g. store='memory'){hint}"
        )
    given = {name: value for name, value in options.items() if value is not None}
    store = _SCHEMES[scheme](location, config, **given)
    if not isinstance(store, Store):
        raise ConfigError(
            f"store={uri!r}: the store registered as {scheme!r} opened {type(store).__name__}, "
            f"not a softdict.store.Store"
        )
    return store


def _open_memory(location: str, config: SoftDictConfig, **options: object) -> MemoryStore:
    if options.pop("create", True) is False:
        raise ConfigError(
            "there is no memory store to open: it lives inside one SoftDict; load a saved one "
            "with SoftDict.load(path)"
        )
    if location or options:
        raise ConfigError(
            f"store='memory' takes no location or store options (got {location!r}, "
            f"{sorted(options)}); collection= is for stores such as 'milvus:...'"
        )
    return MemoryStore(config)


def _open_milvus(location: str, config: SoftDictConfig, **options: object) -> Store:
    # Imported here: pymilvus is an optional extra, and slow to import.
    from softdict.store.milvus import open_milvus_store

    return open_milvus_store(location, config, **options)


register_store("memory", _open_memory)
register_store("milvus", _open_milvus)
