"""What a row of a Milvus store's key collection holds, both ways: one row per key, with its id,
its text, its order (when it was first inserted), its value as JSON and its prepared vector.
A write becomes rows (``MilvusStore.stage`` checks and gathers what they need, ``commit``
upserts them); a lookup reads values and keys back from rows by id.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from softdict._errors import InvalidValueError
from softdict.store.base import StagedWrite
from softdict.store.milvus._collection import MAX_VARCHAR, KeyRows
from softdict.store.milvus.backend import changed_during_lookup
from softdict.values.base import ValueColumn

__all__ = [
    "OrderClock",
    "append_every_value",
    "check_key_sizes",
    "kept_vectors",
    "keys_of_rows",
    "rows_of_write",
    "stored_values",
    "values_of_rows",
]


def check_key_sizes(keys: list[str]) -> None:
    """InvalidValueError for a key longer than a Milvus VARCHAR holds."""
    for key in keys:
        size = len(key.encode("utf-8"))
        if size > MAX_VARCHAR:
            raise InvalidValueError(
                f"the key {key[:40]!r}... is {size:,} bytes of UTF-8; a Milvus store keeps keys "
                f"of up to {MAX_VARCHAR:,} bytes"
            )


# Milvus's largest JSON field, in bytes (its docs' limit; Milvus Lite does not hold a row to it).
MAX_JSON = 65536


def _check_value_size(key: str, value: object) -> None:
    """InvalidValueError for a value longer than a Milvus JSON field holds ({"v": value}, as
    pymilvus sends it): a cluster refuses the write, where Milvus Lite took it. A number, a
    short text (a character takes at most 6 bytes of JSON) or a short list of numbers (25 bytes
    each at most) cannot be; anything else is measured."""
    if value is None or isinstance(value, (bool, int, float)):
        return
    if isinstance(value, str) and len(value) < MAX_JSON // 8:
        return
    numbers = isinstance(value, list) and all(isinstance(x, (int, float)) for x in value)
    if numbers and len(value) < MAX_JSON // 32:  # type: ignore[arg-type]
        return
    size = len(json.dumps({"v": value}, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_JSON:
        raise InvalidValueError(
            f"the value for key {key[:40]!r} is {size:,} bytes as JSON; a Milvus store keeps "
            f"values of up to {MAX_JSON:,} bytes (a vector of up to about 3,000 numbers, a label "
            f"of up to 65,000 characters): keep longer ones in a memory store, or elsewhere "
            f"under a short label"
        )


def _json_value(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def stored_values(
    column: ValueColumn[Any], keys: list[str], items: Mapping[str, object], staged: object
) -> dict[str, object]:
    """Each key's value as Milvus will hold it: as a column of the store's kind gives it back
    (``staged``: ``column``'s staging of the keys' values), as JSON."""
    echo = type(column).for_first_value(keys[0], items[keys[0]])
    echo.append(staged)
    values = {key: _json_value(echo.get(i)) for i, key in enumerate(keys)}
    for key, value in values.items():
        _check_value_size(key, value)
    return values


class OrderClock:
    """Orders for new keys: microseconds since the epoch, increasing in this process (keys
    iterate in the order they were first inserted, across processes as far as clocks agree)."""

    def __init__(self) -> None:
        self._last = 0

    def next(self, n: int) -> Iterator[int]:
        start = max(time.time_ns() // 1000, self._last + 1)
        self._last = start + n - 1
        return iter(range(start, start + n))


def rows_of_write(staged: StagedWrite, clock: OrderClock) -> list[dict[str, Any]]:
    """The rows a staged write upserts: fresh keys with their new vectors (a key being
    re-embedded keeps its id and order), kept keys with the vector they hold."""
    details = staged.details
    found, free, values = details["found"], details["free"], details["values"]
    orders = clock.next(sum(key not in found for key in staged.fresh))
    written = []
    for key in staged.fresh:
        row = found.get(key)
        written.append(
            {
                "id": row["id"] if row else free[key],
                "key": key,
                "order": row["order"] if row else next(orders),
                "value": {"v": values[key]},
                "vector": details["prepared"][key],
            }
        )
    for key in staged.kept:
        vector = details["kept_vectors"][key]
        if vector is None:
            raise changed_during_lookup()  # deleted by another process since it was staged
        row = found[key]
        written.append(
            {
                "id": row["id"],
                "key": key,
                "order": row["order"],
                "value": {"v": values[key]},
                "vector": vector,
            }
        )
    return written


def values_of_rows(
    rows: KeyRows | None,
    ids: np.ndarray,
    column_of: Callable[[list[object], list[str]], ValueColumn[Any]],
    known: dict[int, object] | None = None,
) -> tuple[ValueColumn[Any], np.ndarray]:
    """The values of ``ids`` (any shape; -1 pads) as a column (made by ``column_of``) and each
    id's slot in it: from ``known`` (values by id that came back with this lookup's requests),
    the others fetched from ``rows``. A key gone since the ids were found is an error."""
    wanted = np.unique(ids[ids >= 0])
    listed = wanted.tolist()
    known = known or {}
    missing = sorted(set(listed).difference(known))
    if missing:
        fetched = (
            {}
            if rows is None
            else {row["id"]: row["value"]["v"] for row in rows.get(np.array(missing), ["value"])}
        )
        if len(fetched) < len(missing):
            raise changed_during_lookup()
        known = {**known, **fetched}
    # The keys only name a value in an error message, and stored values passed the checks.
    column = column_of(list(map(known.__getitem__, listed)), list(map(str, listed)))
    slots = np.searchsorted(wanted, np.maximum(ids, 0)).clip(0, max(len(wanted) - 1, 0))
    return column, slots


def append_every_value(rows: KeyRows | None, column: ValueColumn[Any]) -> np.ndarray:
    """Append every stored value to ``column``; their slots."""
    start = len(column)
    if rows is not None:
        for batch in rows.scan(["key", "value"]):
            values = [row["value"]["v"] for row in batch]
            column.append(column.stage(values, [row["key"] for row in batch]))
    return np.arange(start, len(column))


def keys_of_rows(rows: KeyRows | None, ids: np.ndarray) -> list[str]:
    """The keys of ``ids``; a key gone since the ids were found is an error."""
    found = {} if rows is None else {row["id"]: row["key"] for row in rows.get(ids, ["key"])}
    try:
        return [found[i] for i in np.asarray(ids).tolist()]
    except KeyError:
        raise changed_during_lookup() from None


def kept_vectors(
    rows: KeyRows | None, found: dict[str, dict[str, Any]], kept: list[str]
) -> dict[str, Any]:
    """The stored vectors of the ``kept`` keys (found in ``rows``: their rows by key), which a
    write of their values alone keeps; None for a key deleted since it was found."""
    assert rows is not None
    ids = np.array([found[key]["id"] for key in kept], np.int64)
    held = {row["id"]: row["vector"] for row in rows.get(ids, ["vector"])}
    return {key: held.get(found[key]["id"]) for key in kept}
