"""A store kept in Milvus (``store="milvus:..."``): see ``store`` for the design, ``backend`` for
searching, ``_collection`` for the rows, ``_client`` for connecting and the cluster's limits;
``_metadata``, ``_directory``, ``_ids`` and ``_rows`` for the store's metadata, this process's
key directory, the keys' ids, and what a row holds (written and read back); ``_shared`` for what
a handle does when another process cleared the store under it.

Needs the ``milvus`` extra (pymilvus, and milvus-lite for local files).
"""

from typing import Any

from softdict._config import SoftDictConfig
from softdict._errors import ConfigError
from softdict.store.milvus._collection import check_collection_name
from softdict.store.milvus._ids import key_id
from softdict.store.milvus.backend import MilvusBackend
from softdict.store.milvus.store import MilvusStore

__all__ = ["MilvusBackend", "MilvusStore", "key_id", "open_milvus_store"]


def open_milvus_store(location: str, config: SoftDictConfig, **options: Any) -> MilvusStore:
    """``store="milvus:LOCATION"`` with the store options ``collection`` (required) and
    ``create`` (False: only an existing store)."""
    unknown = sorted(set(options) - {"collection", "create"})
    if unknown:
        raise ConfigError(
            f"a Milvus store takes the options collection= and create=, not {unknown}"
        )
    collection = check_collection_name(options.get("collection"))
    return MilvusStore(location, collection, config, create=bool(options.get("create", True)))
