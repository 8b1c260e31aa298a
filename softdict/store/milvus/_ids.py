"""A key's id in a Milvus store, and the rows of keys found by it.

A key's id is a 63-bit hash of its text (``key_id``), so two processes inserting the same key
write the same row, and Milvus's primary key keeps one row per key. A key whose hash another key
already holds (about once in 10^19 pairs) is refused with an InvalidValueError when written.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from softdict._errors import InvalidValueError
from softdict.store.milvus._collection import KeyRows

__all__ = ["key_id", "rows_of_keys"]

_ID_MASK = (1 << 63) - 1


def key_id(key: str) -> int:
    """The id of ``key`` in a Milvus store: non-negative, below 2^63, the same in every process."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _ID_MASK


def rows_of_keys(
    rows: KeyRows | None, keys: list[str], fields: list[str], *, writing: bool = False
) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """The rows of ``keys`` that exist in ``rows`` (key -> row with ``fields``), and for the
    others the id a new row would take. ``writing``: InvalidValueError for a key whose id another
    key holds (otherwise that key is simply not stored)."""
    wanted = {key: key_id(key) for key in dict.fromkeys(keys)}
    held: dict[int, dict[str, Any]] = {}
    if rows is not None and wanted:
        ids = np.fromiter(wanted.values(), np.int64, len(wanted))
        held = {row["id"]: row for row in rows.get(ids, ["key", *fields])}
    found: dict[str, dict[str, Any]] = {}
    free: dict[str, int] = {}
    for key, id_ in wanted.items():
        row = held.get(id_)
        if row is None:
            free[key] = id_
        elif row["key"] == key:
            found[key] = row
        elif writing:
            # Two keys' 63-bit hashes agree: about once in 10^19 pairs. Refused rather than
            # stored under another id, which a delete of the other key would hide.
            raise InvalidValueError(
                f"the keys {key!r} and {row['key']!r} have the same id in a Milvus store "
                f"(a hash collision); store this key with a small change, such as a space"
            )
    return found, free
