"""The two Milvus collections of a softdict store, and every request made to them.

``KeyRows`` is the store itself, one row per key::

    id      INT64 primary key   softdict's id of the key (``_ids.key_id``: from the key's text)
    key     VARCHAR             the key
    order   INT64               when the key was first inserted: iteration order
    value   JSON                {"v": the value}
    vector  FLOAT_VECTOR(d)     the key's prepared embedding
    grams   SPARSE_FLOAT_VECTOR the key's character 3-grams (``_grams``), for spelling candidates;
                                absent from collections made before softdict-milvus format 3

``_metadata.MetaRows`` (the collection ``NAME__softdict``) holds what a store folder's
manifest holds, as text rows by name: the options, the encoder's identity, the query projection,
and one write counter per writing process (see ``store``). It exists from the moment the store
is created; the key collection is made at the first insert, when the embeddings' dimension is
known, and dropped by ``clear``.

Every request stays within a cluster's limits (``_client``): at most 16,384 queries and 16,384
results per query in one search, at most ``IDS_PER_REQUEST`` ids in one get, and requests well
under 64 MB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from softdict._errors import ConfigError, StoreUnavailableError
from softdict._similarity import Metric
from softdict.store.milvus._client import (
    IDS_PER_REQUEST,
    MAX_NQ,
    MAX_TOPK,
    REQUEST_BYTES,
    RESULTS_PER_SEARCH,
    schema_error,
    translated,
)
from softdict.store.milvus._grams import key_grams
from softdict.store.milvus._hits import hit_columns

if TYPE_CHECKING:
    from pymilvus import MilvusClient

__all__ = [
    "INDEX_TYPES",
    "CollectionRows",
    "KeyRows",
    "check_collection_name",
    "meta_name",
    "seen_columns",
    "seen_hits",
]

# What ``index=`` means in a Milvus store: Milvus builds and searches the index itself. FLAT is
# exact (every search scores every allowed key); IVF_FLAT searches the nearest of 1,024 lists.
INDEX_TYPES = {"auto": "FLAT", "flat": "FLAT", "ivf": "IVF_FLAT"}
_IVF_PARAMS = {"nlist": 1024}
_IVF_SEARCH = {"nprobe": 32}
_METRICS = {Metric.INNER_PRODUCT: "IP", Metric.L2: "L2"}
# Milvus's longest VARCHAR, in bytes of UTF-8.
MAX_VARCHAR = 65535
_META_SUFFIX = "__softdict"
# Milvus's rule for a collection name: a letter or underscore, then letters, digits and
# underscores, 255 characters at most; the metadata collection's suffix takes 10 of them.
_COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_COLLECTION_NAME = 255 - len(_META_SUFFIX)
# The fields a search or a sample returns for ``SeenKeys``: the keys, for the spelling channel,
# and the values.
SEEN_FIELDS = ["key", "value"]


class SeenKeys(Protocol):
    """Told of the rows that come back with a search, a sample or a get: a served store keeps
    their keys' spelling forms, and their values for the lookup in progress."""

    def seen_fields(self) -> list[str]:
        """``SEEN_FIELDS``, or ``["value"]`` where the lookup in progress spells nothing."""

    def see(self, ids: list[int], keys: list[str] | None, values: list[object]) -> None:
        """The rows' ids, keys (None where not asked for) and values."""


_KEY_FIELDS = {
    "id": "INT64",
    "key": "VARCHAR",
    "order": "INT64",
    "value": "JSON",
    "vector": "FLOAT_VECTOR",
}
_GRAMS_FIELD = {"grams": "SPARSE_FLOAT_VECTOR"}
_GRAMS_SEARCH = {"metric_type": "IP", "params": {}}
# Key ids are below 2^63 (``_ids.key_id``); a sample's ranges hold this many keys on average.
ID_SPACE = 1 << 63
_RANGE_KEYS = 2048
# A sample's request is expected to hold at most this many rows, a quarter of its limit.
_REQUEST_KEYS = 4096


def check_collection_name(collection: object) -> str:
    """``collection`` if Milvus accepts it as the name of a softdict store, else ConfigError,
    before any request is sent (Milvus would refuse it only after logging a traceback)."""
    if not isinstance(collection, str) or not collection:
        raise ConfigError(
            "a Milvus store needs a collection name: SoftDict(store='milvus:...', "
            f"collection='prices'), got {collection!r}"
        )
    if not _COLLECTION_NAME.fullmatch(collection) or len(collection) > MAX_COLLECTION_NAME:
        raise ConfigError(
            f"collection={collection[:80]!r}{'...' if len(collection) > 80 else ''} is not a "
            f"Milvus collection name: it must start with a letter or an underscore, hold only "
            f"ASCII letters, digits and underscores, and be at most {MAX_COLLECTION_NAME} "
            f"characters long ({len(collection)} given); e.g. collection='city_prices'"
        )
    return collection


def meta_name(collection: str) -> str:
    return collection + _META_SUFFIX


def index_type(option: str) -> str:
    """The Milvus index an ``index=`` option names; ConfigError for the others."""
    if option not in INDEX_TYPES:
        raise ConfigError(
            f"index={option!r} is not available in a Milvus store, which builds its own index; "
            f"use one of {sorted(INDEX_TYPES)} ('auto' and 'flat' are exact)"
        )
    return INDEX_TYPES[option]


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, max(1, size)):
        yield slice(start, start + max(1, size))


def _id_range(start: int, width: int) -> str:
    """The filter of the ids in [start, start + width) on the circle of the id space ("" for
    every id)."""
    if width >= ID_SPACE:
        return ""
    end = start + width
    if end <= ID_SPACE:
        return f"id >= {start} and id < {end}"
    return f"id >= {start} or id < {end - ID_SPACE}"  # the range wraps around the end


def seen_columns(rows: Iterable[Mapping[str, Any]], seen: SeenKeys | None) -> list[int]:
    """The ids of a query's or get's ``rows``, telling ``seen`` their ids, keys and values
    (``SEEN_FIELDS``) in one pass."""
    if seen is None:
        return [row["id"] for row in rows]
    ids = [row["id"] for row in rows]
    keys = [row["key"] for row in rows] if "key" in seen.seen_fields() else None
    seen.see(ids, keys, [row["value"]["v"] for row in rows])
    return ids


def seen_hits(hits: Any, seen: SeenKeys | None, sign: float) -> tuple[list[int], list[float]]:
    """The ids and scores (higher is better: ``sign`` times Milvus's distance) of one query's
    search ``hits``, read by column (``_hits``), telling ``seen`` their ids, keys and values."""
    ids, distances, columns = hit_columns(hits, seen.seen_fields() if seen is not None else [])
    if seen is not None:
        seen.see(ids, columns.get("key"), [value["v"] for value in columns["value"]])
    return ids, [sign * distance for distance in distances]


def _ids_list(ids: np.ndarray) -> list[int]:
    return [int(i) for i in np.asarray(ids, dtype=np.int64).ravel()]


class CollectionRows:
    """A collection of a store: the client, where it is, and its name."""

    def __init__(self, client: MilvusClient, location: str, name: str) -> None:
        self.client = client
        self.location = location
        self.name = name

    def calling(self, what: str) -> Any:
        return translated(self.location, f"{what} (collection {self.name!r})")

    def exists(self) -> bool:
        with self.calling("list collections"):
            return bool(self.client.has_collection(self.name))

    def _create(self, schema: Any, params: Any, what: str) -> None:
        """Create the collection unless it exists; another process creating it at the same
        moment is no error (the caller checks what it made)."""
        try:
            with self.calling(what):
                if not self.client.has_collection(self.name):
                    self.client.create_collection(
                        self.name, schema=schema, index_params=params, consistency_level="Strong"
                    )
        except StoreUnavailableError:
            if not self.exists():
                raise

    def drop(self) -> None:
        with self.calling("drop the collection"):
            self.client.drop_collection(self.name)


class KeyRows(CollectionRows):
    """The rows of the keys (see the module docstring)."""

    def __init__(
        self,
        client: MilvusClient,
        location: str,
        name: str,
        dim: int,
        metric: Metric,
        index: str = "FLAT",
        pairs: bool = True,
    ) -> None:
        super().__init__(client, location, name)
        self.dim = dim
        self.metric = metric
        self.index = index
        # Whether rows hold their 3-grams (``_grams``; ``check_schema`` reads an older collection's)
        # and their pair features in that field (format 4: the store's manifest tells).
        self.grams, self.pairs = True, pairs
        # Milvus's L2 is the squared distance, lower nearer: scores here are higher nearer.
        self._sign = -1.0 if metric is Metric.L2 else 1.0
        self._search_params: dict[str, Any] = {
            "metric_type": _METRICS[metric],
            "params": dict(_IVF_SEARCH) if index == "IVF_FLAT" else {},
        }

    def create(self) -> None:
        """Create the collection, or, where another process just did, check it fits."""
        from pymilvus import DataType

        schema = self.client.create_schema(auto_id=False, description="softdict store")
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("key", DataType.VARCHAR, max_length=MAX_VARCHAR)
        schema.add_field("order", DataType.INT64)
        schema.add_field("value", DataType.JSON)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
        schema.add_field("grams", DataType.SPARSE_FLOAT_VECTOR)
        params = self.client.prepare_index_params()
        params.add_index(
            "vector",
            index_type=self.index,
            metric_type=_METRICS[self.metric],
            params=dict(_IVF_PARAMS) if self.index == "IVF_FLAT" else {},
        )
        params.add_index("grams", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        self._create(schema, params, "create the collection")
        self.check_schema(self.name)

    def check_schema(self, collection: str) -> None:
        """StoreFormatError unless the collection has softdict's fields (with or without the
        3-grams of format 3) and this dimension."""
        with self.calling("describe the collection"):
            described = self.client.describe_collection(self.name)
        fields = {field["name"]: field for field in described.get("fields", [])}
        kinds = {name: getattr(f["type"], "name", str(f["type"])) for name, f in fields.items()}
        expected = {**_KEY_FIELDS, **_GRAMS_FIELD}
        self.grams = kinds == expected
        if kinds not in (expected, _KEY_FIELDS):
            raise schema_error(
                self.location, collection, f"its fields are {kinds}, softdict's are {expected}"
            )
        dim = int(fields["vector"].get("params", {}).get("dim", -1))
        if dim != self.dim:
            raise schema_error(
                self.location,
                collection,
                f"its vectors are {dim}-dim, and its metadata says {self.dim}",
            )

    # -- rows ------------------------------------------------------------------------------------

    def count(self) -> int:
        with self.calling("count the keys"):
            rows = self.client.query(self.name, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def get(self, ids: np.ndarray, fields: list[str]) -> list[dict[str, Any]]:
        """The rows of ``ids`` that exist, with ``fields`` (and ``id``), in no set order."""
        wanted = _ids_list(ids)
        found: list[dict[str, Any]] = []
        for part in _chunks(len(wanted), IDS_PER_REQUEST):
            with self.calling("read keys"):
                found.extend(self.client.get(self.name, ids=wanted[part], output_fields=fields))
        return found

    def upsert(self, rows: list[dict[str, Any]]) -> None:
        """Write whole rows (their 3-grams made here, where the collection holds them), in
        requests under ``REQUEST_BYTES`` each."""
        if self.grams:
            grams = key_grams([row["key"] for row in rows])
            rows = [{**row, "grams": vector} for row, vector in zip(rows, grams)]
        start, size = 0, 0
        for i, row in enumerate(rows):
            row_bytes = 4 * self.dim + 8 * len(row["key"]) + len(json.dumps(row["value"])) + 64
            row_bytes += 12 * len(row.get("grams", ()))
            if size and size + row_bytes > REQUEST_BYTES:
                self._upsert(rows[start:i])
                start, size = i, 0
            size += row_bytes
        if start < len(rows):
            self._upsert(rows[start:])

    def _upsert(self, rows: list[dict[str, Any]]) -> None:
        with self.calling(f"write {len(rows)} keys"):
            self.client.upsert(self.name, rows)

    def delete(self, ids: np.ndarray) -> None:
        wanted = _ids_list(ids)
        for part in _chunks(len(wanted), IDS_PER_REQUEST):
            with self.calling("delete keys"):
                self.client.delete(self.name, ids=wanted[part])

    def scan(self, fields: list[str], batch: int = 4096) -> Iterator[list[dict[str, Any]]]:
        """Every row, with ``fields`` (and ``id``), in batches."""
        with self.calling("read every key"):
            iterator = self.client.query_iterator(
                self.name, batch_size=batch, filter="", output_fields=fields
            )
        try:
            while True:
                with self.calling("read every key"):
                    rows = iterator.next()
                if not rows:
                    return
                yield rows
        finally:
            iterator.close()

    def draw_by_id(
        self,
        count: int,
        n: int,
        rng: np.random.Generator,
        seen: SeenKeys | None = None,
        query: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """About ``count`` ids of the ``n`` rows, a uniform sample without replacement: the rows
        whose ids lie in random ranges of the id space, which is valid where ids are uniform
        hashes (a store's: ``_ids``); ranges that overlap give their keys once, and the union
        of uniformly placed ranges is still uniform. Each range is expected to hold at most
        ``_RANGE_KEYS`` rows and a request ``_REQUEST_KEYS``, far below a request's limit of
        results: a request that reaches it (the store grew past ``n`` by far) is an error, not
        a sample cut short. With a prepared ``query`` (d,) the rows are searched, not read, and
        come with their scores (an exact index scores every row that passes a filter): one
        request for a draw and its scores. ``seen`` is given the rows (``SEEN_FIELDS``)."""
        ranges = max(1, -(-count // _RANGE_KEYS))
        width = min(ID_SPACE, round(ID_SPACE * count / ranges / max(n, 1)))
        found: list[int] = []
        scores: list[float] = []
        fields = seen.seen_fields() if seen is not None else []
        per_request = max(1, _REQUEST_KEYS // _RANGE_KEYS)
        for first in range(0, ranges, per_request):
            here = min(per_request, ranges - first)
            starts = rng.integers(0, ID_SPACE - 1, size=here, endpoint=True)
            terms = [_id_range(int(start), width) for start in starts]
            expression = "" if "" in terms else " or ".join(f"({term})" for term in terms)
            if query is None:
                with self.calling("sample keys"):
                    rows = self.client.query(
                        self.name, filter=expression, output_fields=fields, limit=MAX_TOPK
                    )
            else:
                with self.calling("sample keys"):
                    (rows,) = self._search_vectors(query[None, :], MAX_TOPK, expression, fields)
            if len(rows) >= MAX_TOPK:
                raise StoreUnavailableError(
                    f"the Milvus store at {self.location} grew during the lookup (a sample of "
                    f"{n:,} keys' id space held {len(rows):,}); try again"
                )
            if query is None:
                found.extend(seen_columns(rows, seen))
            else:
                hit_ids, hit_scores = seen_hits(rows, seen, self._sign)
                found.extend(hit_ids)
                scores.extend(hit_scores)
        ids = np.asarray(found, dtype=np.int64)
        return ids, None if query is None else np.asarray(scores, dtype=np.float64)

    # -- searching -------------------------------------------------------------------------------

    def search(
        self, queries: np.ndarray, k: int, expression: str = "", seen: SeenKeys | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best rows (k <= _client.MAX_TOPK) per prepared query that pass ``expression``:
        float64 scores (higher is better) and int64 ids, padded with -inf and -1. ``seen`` is
        given the rows found (``SEEN_FIELDS``), which then come with them."""
        m = len(queries)
        scores = np.full((m, k), -np.inf)
        ids = np.full((m, k), -1, dtype=np.int64)
        per_request = min(
            MAX_NQ, max(1, RESULTS_PER_SEARCH // max(k, 1)), max(1, REQUEST_BYTES // (4 * self.dim))
        )
        fields = seen.seen_fields() if seen is not None else []
        for part in _chunks(m, per_request):
            with self.calling("search"):
                results = self._search_vectors(queries[part], k, expression, fields)
            for i, hits in enumerate(results, start=part.start):
                hit_ids, hit_scores = seen_hits(hits, seen, self._sign)
                ids[i, : len(hit_ids)] = hit_ids
                scores[i, : len(hit_ids)] = hit_scores
        return scores, ids

    def _search_vectors(
        self, queries: np.ndarray, k: int, expression: str, fields: list[str]
    ) -> Any:
        """One search request of the dense vectors (the caller names it in ``calling``)."""
        return self.client.search(
            self.name,
            data=[row.tolist() for row in queries],
            limit=k,
            filter=expression,
            search_params=self._search_params,
            anns_field="vector",
            output_fields=fields,
        )

    def search_grams(
        self, vectors: list[dict[int, float]], limit: int, expression: str = ""
    ) -> list[list[tuple[int, str]]]:
        """For each sparse vector (``_grams``), the ids and keys of up to ``limit`` rows (at most
        ``_client.MAX_TOPK``) that pass ``expression``, by inner product with it, best first
        (none for an empty vector). Only where the collection holds the 3-grams."""
        found: list[list[tuple[int, str]]] = [[] for _ in vectors]
        asked = [i for i, vector in enumerate(vectors) if vector]
        per_request = min(MAX_NQ, max(1, RESULTS_PER_SEARCH // max(limit, 1)))
        for part in _chunks(len(asked), per_request):
            wanted = asked[part]
            with self.calling("search the 3-grams"):
                results = self.client.search(
                    self.name,
                    data=[vectors[i] for i in wanted],
                    limit=limit,
                    filter=expression,
                    search_params=_GRAMS_SEARCH,
                    anns_field="grams",
                    output_fields=["key"],
                )
            for i, hits in zip(wanted, results):
                found[i] = [(hit["id"], hit["entity"]["key"]) for hit in hits]
        return found
