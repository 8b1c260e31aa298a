"""A store kept in Milvus (``store="milvus:..."``): see ``store`` for the design, ``backend`` for
searching, ``_collection`` for the rows, ``_client`` for connecting and the cluster's limits;
``_metadata``, ``_directory``, ``_ids`` and ``_rows`` for the store's metadata, this process's
key directory, the keys' ids, and what a row holds (written and read back).

Needs the ``milvus`` extra (pymilvus, and milvus-lite for local files).
"""

from softdict.store.milvus._ids import key_id
from softdict.store.milvus.backend import MilvusBackend
from softdict.store.milvus.store import MilvusStore, open_milvus_store

__all__ = ["MilvusBackend", "MilvusStore", "key_id", "open_milvus_store"]
