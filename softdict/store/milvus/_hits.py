"""A search's hits, read by column.

pymilvus returns one query's hits as a list of ``Hit`` dicts whose JSON fields it decodes on
first access, hit by hit, walking the response's protobuf message for each one: 29 ms for the
4,096 hits of one sampled-tail request on the test machine, against 2 ms to decode the same JSON
with orjson. A lookup's head and sample bring back thousands of hits, so that walk was the largest
single cost of a full-attention lookup in the client. pymilvus's list of hits (``HybridHits``)
also holds the ids, the scores and each JSON field's column as received; ``hit_columns`` reads
them at once. Where a result lacks them (another pymilvus version, a hand-made list in a test),
the hits are read one by one, with the same answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

__all__ = ["hit_columns"]

_JSON = 23  # pymilvus's DataType.JSON, kept as a number so this module imports without pymilvus


def hit_columns(
    hits: Sequence[Any], fields: Sequence[str]
) -> tuple[list[int], list[float], dict[str, list[Any]]]:
    """The ids, the distances and each of ``fields`` of one query's ``hits``, in hit order."""
    columns = _read_by_column(hits, fields)
    if columns is not None:
        return columns
    return (
        [hit["id"] for hit in hits],
        [hit["distance"] for hit in hits],
        {field: [hit["entity"][field] for hit in hits] for field in fields},
    )


def _read_by_column(
    hits: Any, fields: Sequence[str]
) -> tuple[list[int], list[float], dict[str, list[Any]]] | None:
    ids, distances = getattr(hits, "ids", None), getattr(hits, "distances", None)
    lazy, start = getattr(hits, "lazy_field_data", None), getattr(hits, "start", None)
    if not isinstance(ids, list) or not isinstance(distances, list) or not isinstance(start, int):
        return None
    if lazy is None or len(ids) != len(hits) or len(distances) != len(hits):
        return None
    raw = {data.field_name: data for data in lazy}
    columns: dict[str, list[Any]] = {}
    for field in fields:
        data = raw.get(field)
        if data is None:
            # A field decoded when the hits were made (a scalar): each hit holds it already,
            # and reading it from the hit's dict does not make pymilvus decode the others.
            entities = [dict.__getitem__(hit, "entity") for hit in list.__iter__(hits)]
            if not all(field in entity for entity in entities):
                return None
            columns[field] = [entity[field] for entity in entities]
            continue
        if data.type != _JSON or data.is_dynamic or len(data.valid_data):
            return None
        cells = data.scalars.json_data.data[start : start + len(ids)]
        if len(cells) != len(ids):
            return None
        columns[field] = orjson.loads(b"[" + b",".join(cells) + b"]")
    return ids, distances, columns
