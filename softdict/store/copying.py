"""``copy_into``: one store's keys, values, vectors and query projection written into another
(``SoftDict.copy_to``, and a Milvus store's copy in memory), and taken back where it fails."""

from __future__ import annotations

from contextlib import suppress
from typing import TypeVar

from softdict.index.base import require_vectors
from softdict.store.base import Store

__all__ = ["copy_into"]

StoreT = TypeVar("StoreT", bound=Store)


def copy_into(source: Store, target: StoreT, batch: int = 4096) -> StoreT:
    """Every key of ``source`` with its value and vector (as the source prepared it), and its
    query projection, written into the empty ``target`` in batches; nothing is encoded again. A
    copy that fails part of the way (a key Milvus cannot hold) deletes the keys it wrote, the
    shape it recorded where the target is empty again, and a Milvus collection it made, so that
    it can be tried again; not what another handle wrote meanwhile (clearing did: a probe)."""
    if len(source):
        require_vectors(source.backend, "copying a store")
    ids, unshaped = source.ids(), target.dim is None  # the copy records its shape
    written: list[str] = []
    try:
        for start in range(0, len(ids), batch):
            part_ids = ids[start : start + batch]
            # The keys of these ids, not of a second listing: another process's write between
            # two listings paired keys with their neighbours' values and vectors (a probe).
            part_keys = source.keys_of(part_ids)
            column, slots = source.values_of(part_ids)
            vectors = source.backend.vectors(part_ids)
            items = {key: column.get(int(slot)) for key, slot in zip(part_keys, slots.tolist())}
            staged = target.stage(items, dict(zip(part_keys, vectors)))
            written.extend(part_keys)  # before the commit: a commit may fail part of the way
            target.commit(staged)
        projection = source.projection
        if projection is not None:
            target.projection = projection
        # The vectors copied are the source's decoded ones where it keeps codes: their error
        # goes with them (a copy reported a bound of 0.25 where its source's was 0.30).
        error = source.backend.code_error() if len(source) else None
        if error is not None:
            target.backend.carry(error)
    except BaseException:
        with suppress(Exception):  # a server that is down: its own error says more
            for start in range(0, len(written), batch):
                target.remove_keys(written[start : start + batch])
            if unshaped and not len(target):  # free the kind and dimension it recorded
                target.clear()
            target.abandon()
        raise
    return target
