"""SoftDict's persistence: ``save`` to a folder, ``load`` from one, ``open`` a store kept
outside this process. The folder format, its locks and its atomic swap are ``_persistence``'s."""

from __future__ import annotations

import os
from typing import TypeVar

from softdict._config import SoftDictConfig, check_number
from softdict._encoder_match import store_encoder
from softdict._errors import ConfigError
from softdict._facade import Facade
from softdict._persistence import LOCK_TIMEOUT, load_store, save_store
from softdict.store import open_store

__all__ = ["Saving"]

S = TypeVar("S", bound="Saving")


class Saving(Facade):
    """Saving a ``SoftDict`` and getting one back."""

    def save(
        self, path: str | os.PathLike[str], *, timeout: float = LOCK_TIMEOUT, replace: bool = True
    ) -> None:
        """Save the store to the folder ``path``, atomically: a crash leaves the old or the new.

        The folder holds JSON and .npy files (never pickle), a manifest with checksums, and the
        encoder's identity. An existing folder at ``path`` is replaced only if it is a store, and
        with ``replace=False`` not even then (checked under the lock, so a store another process
        saved there meanwhile is kept).
        Saves and loads of one path, from any process, take turns: each holds an advisory lock
        (the file ``.NAME.lock`` beside the folder), waiting up to ``timeout`` seconds for it.

        Raises:
            StoreFormatError: ``path`` is not writable as a store, or holds one and ``replace``
                is False.
            StoreBusyError: another process held the lock for longer than ``timeout``.
            ConfigError: ``path`` is no str or os.PathLike of str, ``timeout`` is not a number
                >= 0, or ``replace`` not True or False.
        """
        check_number("timeout", timeout, "a number of seconds >= 0", lambda v: v >= 0)
        if not isinstance(replace, bool):  # "no" is truthy: it would replace
            raise ConfigError(f"replace must be True or False, got {replace!r}")
        # Outside the store's lock: a slow encoder's fingerprint must not hold up lookups.
        identity = self._encoder.identity()
        with self._lock:
            save_store(self._store, identity, path, float(timeout), replace=replace)

    def _abandon(self) -> None:
        """Drop the store where this SoftDict made it and nothing was written to it
        (``Store.abandon``): the command line's build that failed."""
        with self._lock:
            self._store.abandon()

    @classmethod
    def open(
        cls: type[S],
        store: str,
        *,
        collection: str | None = None,
        encoder: object = None,
        query_cache_size: int = 1024,
        temperature: float | None = None,
        lexical: float | None = None,
    ) -> S:
        """Open an existing store kept outside this process (``store="milvus:..."``) with its
        own options and encoder; unlike ``SoftDict(store=..., collection=...)``, never make one.

        Args:
            store: "milvus:PATH.db" or "milvus:http://host:19530".
            collection: the collection that holds it.
            encoder: the encoder to use; it must embed like the store's. None loads the
                recorded one.
            query_cache_size: how many query embeddings to keep in this process.
            temperature: what this process uses in place of the store's temperature, which
                stays as it is (setting ``sd.temperature`` writes it to the store); None: the
                store's.
            lexical: the same for the weight of spelling.

        Raises:
            StoreFormatError: no softdict store is there, or the collection is not one.
            EncoderError: the encoder does not match the store's.
            StoreUnavailableError: the store's server cannot be reached.
            ConfigError: ``temperature`` or ``lexical`` is out of its range.
        """
        named = {"temperature": temperature, "lexical": lexical}
        config = SoftDictConfig.build(
            query_cache_size=query_cache_size,
            **{name: value for name, value in named.items() if value is not None},
        )
        opened = open_store(store, config, collection=collection, create=False)
        return cls._from_store(opened, store_encoder(opened, encoder, query_cache_size))

    @classmethod
    def load(
        cls: type[S],
        path: str | os.PathLike[str],
        *,
        encoder: object = None,
        timeout: float = LOCK_TIMEOUT,
        accept_variant: bool = False,
        index: str | None = None,
    ) -> S:
        """Load a store saved with ``save``.

        Args:
            path: the store folder.
            encoder: the encoder to use; it must embed like the one the store was saved with.
                None loads the recorded encoder (a model name or path).
            timeout: how long to wait for another process's save or load of ``path``.
            accept_variant: use ``encoder`` although it is another variant of the recorded model
                (``"bundled-int8"`` for a store built on the bundled model, or the reverse):
                the keys keep their embeddings and queries get the variant's, so scores shift
                a little. A later ``save`` records the variant in use.
            index: rebuild the saved index as this one (an ``index=`` option of ``SoftDict``)
                from the vectors it kept, decoded where it kept codes (their error is carried:
                ``Attention.weight_error``); nothing is embedded again. None keeps the saved
                index. It loads a store saved with an index this version refuses to build.
                A later ``save`` records the new index.

        Raises:
            StoreFormatError: a file is missing, truncated, corrupted or of an unknown version,
                or the saved index keeps no vectors to rebuild as ``index``.
            EncoderError: the encoder does not match the store's, or cannot be loaded.
            StoreBusyError: another process held the store's lock for longer than ``timeout``.
            ConfigError: ``path`` is no str or os.PathLike of str, ``timeout`` is not a number
                >= 0, ``accept_variant`` not True or False, or ``index`` names no index, one
                that cannot hold the store's keys, or one that holds the vectors added
                (``"flat"``, ``"compressed"``) where the saved index kept lossy codes.
        """
        check_number("timeout", timeout, "a number of seconds >= 0", lambda v: v >= 0)
        if not isinstance(accept_variant, bool):  # "no" is truthy: it would accept
            raise ConfigError(f"accept_variant must be True or False, got {accept_variant!r}")
        store, text_encoder = load_store(
            path, encoder, float(timeout), accept_variant=accept_variant, index=index
        )
        return cls._from_store(store, text_encoder)
