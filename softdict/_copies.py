"""SoftDict's copies: ``copy`` (and ``copy.copy``, ``copy.deepcopy``), ``copy_to`` another
store, and pickling. What is copied is the store (``softdict.store.copying``, ``snapshot``); the
encoder is shared, never copied or pickled."""

from __future__ import annotations

from typing import Any, TypeVar

from softdict._encoder_match import store_encoder
from softdict._errors import ConfigError, EncoderError
from softdict._facade import Facade
from softdict._files import StoreFiles
from softdict._persistence import restore_snapshot
from softdict.encoders import EncoderIdentity
from softdict.store import StoreState, copy_into, open_store

__all__ = ["Copies"]

C = TypeVar("C", bound="Copies")


class Copies(Facade):
    """Copying a ``SoftDict``, into memory or another store, and pickling it."""

    def copy(self: C) -> C:
        """An independent copy: the same options, keys, values, vectors and query projection
        (nothing is encoded again), sharing the encoder; changes to either store never reach
        the other. Attributes set on this one are carried over as ``copy.copy`` carries them."""
        return self._copied()

    def copy_to(self: C, store: str = "memory", *, collection: str | None = None) -> C:
        """A copy of this SoftDict in another store: every key with its value and vector, the
        options, the query projection and the encoder; nothing is encoded again. ``store`` and
        ``collection`` are as for ``SoftDict(...)``: ``copy_to("milvus:./p.db",
        collection="prices")`` moves an in-memory store into Milvus, and ``copy_to()`` brings a
        Milvus store back into memory (then ``save`` it to a folder). The target must hold no
        keys, and an existing collection this store's options (but for ``query_cache_size``,
        ``batch_size`` and ``progress``) and encoder.

        Raises:
            ConfigError: the target holds keys or other options, or cannot build this index.
            EncoderError: the target collection records another encoder.
            InvalidValueError: a key or value the target cannot hold; the keys copied are
                deleted again (a collection the copy made, dropped).
            StoreUnavailableError: the target's server cannot be reached.
        """
        with self._lock:
            config, where = self._store.config, repr(store)
            where += f" (collection {collection!r})" if collection else ""
            # Nothing named: an existing collection opens with its options, which must be these.
            target = open_store(store, config.naming(()), collection=collection)
            if held := len(target):
                raise ConfigError(
                    f"copy_to writes into an empty store, and {where} holds "
                    f"{held:,} keys; copy into a new collection, or clear it"
                )
            config.check_same_answers(target.config, where)
            encoder = store_encoder(target, self._encoder, self._store.config.query_cache_size)
            copy_into(self._store, target)
            return type(self)._from_store(target, encoder)

    def __copy__(self: C) -> C:
        return self._copied()

    # The encoder is shared, not copied: it holds a model's weights and no state of the store.
    def __deepcopy__(self: C, memo: dict[int, object]) -> C:
        return self._copied(memo)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickling: the store's contents, the attributes set on it, and the encoder's name,
        never its weights; the unpickling process loads the encoder by name. An encoder that
        cannot be loaded by name (an object passed as ``encoder=``) cannot be pickled: save and
        load instead."""
        if not self._encoder.loadable_by_name:
            raise EncoderError(
                f"cannot pickle this SoftDict: its encoder {self._encoder.name!r} cannot be "
                f"loaded by name in another process. Save it with sd.save(path) and load it "
                f"with SoftDict.load(path, encoder=...)"
            )
        identity = self._encoder.identity()  # outside the lock, as save fingerprints it
        with self._lock:
            arguments = (type(self), *self._store.snapshot(), identity)
            return _unpickle, arguments, self._pickled_attributes() or None


def _unpickle(cls: type[C], state: StoreState, files: StoreFiles, identity: EncoderIdentity) -> C:
    """Rebuild a pickled SoftDict (see ``Copies.__reduce__``)."""
    store, encoder = restore_snapshot(state, files, identity)
    return cls._from_store(store, encoder)
