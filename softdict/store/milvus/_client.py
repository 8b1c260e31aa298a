"""The pymilvus client as softdict uses it: connecting, turning its errors into softdict's, and
keeping every request within the limits a Milvus cluster enforces (Milvus Lite 2.5 enforces
them too, so the tests meet them where a cluster would).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from softdict._errors import ConfigError, StoreFormatError, StoreUnavailableError

if TYPE_CHECKING:
    from pymilvus import MilvusClient

__all__ = [
    "IDS_PER_REQUEST",
    "MAX_NQ",
    "MAX_TOPK",
    "REQUEST_BYTES",
    "RESULTS_PER_SEARCH",
    "TOKEN_VARIABLE",
    "CollectionGone",
    "connect",
    "is_server_uri",
    "shown",
    "translated",
]

# A cluster's quota.limits.maxTopK and maxNQ: a search asks for at most this many keys per query,
# and at most this many queries per request.
MAX_TOPK = 16384
MAX_NQ = 16384
# gRPC messages are limited to 64 MB, and requests are cut far smaller: Milvus Lite 2.5.1 took
# 30x longer per row for inserts of 7.7 MB (5,000 rows of 384 dims) than of 6 MB or less here
# (benchmarks/milvus_store.py's insert column is measured with this value).
REQUEST_BYTES = 4 * 2**20
# Scores and ids one search request returns (nq x k): about 16 MB of response.
RESULTS_PER_SEARCH = 1 << 20
# Ids in one ``get`` or ``id in [...]`` filter: the filter's cost grows with its length, and a
# query returns at most 16,384 rows.
IDS_PER_REQUEST = 4096
# pymilvus's status code for a server it cannot reach, and Milvus's for a collection that does
# not exist (another process's clear dropped it).
_UNAVAILABLE = 2
_COLLECTION_NOT_FOUND = 100
# The file names milvus-lite 2.5 opens (its server refuses others with a RuntimeError).
_LITE_NAME = re.compile(r"[a-zA-Z0-9.\-_]+")
_LITE_NAME_MAX = 36
# A Milvus Lite file is an SQLite database (whose files begin with this header) holding this
# table, among others (milvus-lite 2.5).
_SQLITE_HEADER = b"SQLite format 3\x00"
_LITE_TABLE = "collection_meta"
# The environment variable that holds a server's token (an API key, or "user:password"), for
# servers and clusters with authentication on: kept out of code, URIs and messages. A URI's own
# "https://user:password@host:19530" works too (pymilvus reads it); messages hide the password.
TOKEN_VARIABLE = "SOFTDICT_MILVUS_TOKEN"


# This process's hold on each Milvus Lite file (resolved path) it opened (``_hold_lite_file``):
# milvus-lite serves each from a process of its own, started by the first open.
_LITE_HOLDS: dict[str, FileLock] = {}
_LITE_HOLDS_LOCK = threading.Lock()


class CollectionGone(StoreUnavailableError):
    """A collection a request named does not exist: another process dropped it (a clear), so
    what this process knows of the store is stale."""


def is_server_uri(location: str) -> bool:
    return location.startswith(("http://", "https://", "tcp://", "grpc://"))


def _userinfo(location: str) -> tuple[str, str, str]:
    """A server URI split around its credentials: ("https://", "user:password", "@host..."),
    the middle empty where it has none."""
    scheme, separator, rest = location.partition("://")
    authority, slash, path = rest.partition("/")
    if not separator or "@" not in authority:
        return location, "", ""
    userinfo, host = authority.rsplit("@", 1)
    return f"{scheme}://", userinfo, f"@{host}{slash}{path}"


def shown(location: str) -> str:
    """``location`` as messages show it: a server URI's password replaced by ``***``."""
    before, userinfo, after = _userinfo(location)
    return f"{before}{userinfo.split(':', 1)[0]}:***{after}" if userinfo else location


def _without_mvcc_warning(record: logging.LogRecord) -> bool:
    return "mvccTs" not in record.getMessage()


def _without_collection_gone(record: logging.LogRecord) -> bool:
    # A collection another process's clear dropped: softdict reads the store again and tries
    # once more (``CollectionGone``), where pymilvus logged an ERROR with a traceback (a probe).
    return "collection not found" not in record.getMessage()


def connect(location: str, *, must_exist: bool = False) -> MilvusClient:
    """A client for ``location``: a server's URI (``http://host:19530``) or the path of a Milvus
    Lite file (``./prices.db``), which Milvus Lite opens in a process of its own. With
    ``must_exist``, a Lite file that is not there is a StoreFormatError: milvus-lite makes one,
    and ``SoftDict.open`` of a mistyped path left a new database behind (a probe)."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise ConfigError(
            "store='milvus:...' needs pymilvus and milvus-lite: pip install 'softdict[milvus]'"
        ) from None
    if not location:
        raise ConfigError(
            "store='milvus:' needs a location: a server URI (milvus:http://host:19530) or a "
            "Milvus Lite file (milvus:./prices.db)"
        )
    if not is_server_uri(location):
        path = Path(location)
        if path.suffix != ".db" and path.name != ".db":
            raise ConfigError(
                f"store='milvus:{location}': a Milvus Lite file name must end in .db "
                f"(e.g. milvus:./prices.db); a server is named by its URI (milvus:http://...)"
            )
        if not _LITE_NAME.fullmatch(path.name) or len(path.name) > _LITE_NAME_MAX:
            raise ConfigError(
                f"store='milvus:{location}': Milvus Lite takes a file name of at most "
                f"{_LITE_NAME_MAX} characters, of ASCII letters, digits, '.', '-' and '_' "
                f"(e.g. milvus:./prices.db); the folder's name may be any"
            )
        if not path.parent.is_dir():
            raise ConfigError(f"store='milvus:{location}': the folder {path.parent} does not exist")
        if must_exist and not path.is_file():
            raise StoreFormatError(
                f"store='milvus:{location}': there is no Milvus Lite file at {path}; build a store "
                f"there first (SoftDict(store=..., collection=...) or softdict build make it)"
            )
        _refuse_another_programs_database(location, path)
        location = str(path.resolve())
        with warnings.catch_warnings():
            # milvus-lite 2.5.1 imports pkg_resources, which warns that it is deprecated on
            # every import; that is milvus-lite's to fix, and says nothing to our users.
            warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
            try:
                import milvus_lite  # noqa: F401
            except ImportError:
                raise ConfigError(
                    f"store='milvus:{location}' is a Milvus Lite file, which needs milvus-lite: "
                    f"pip install 'softdict[milvus]'"
                ) from None
    # Milvus Lite does not report a read timestamp, and pymilvus logs a warning on every
    # read of all rows that it falls back on its own clock, which is right for one file.
    logging.getLogger("pymilvus.client.iterator.query_iterator").addFilter(_without_mvcc_warning)
    logging.getLogger("pymilvus.decorators").addFilter(_without_collection_gone)
    token = os.environ.get(TOKEN_VARIABLE, "") if is_server_uri(location) else ""
    holding = not is_server_uri(location) and _hold_lite_file(location)
    try:
        try:
            client = _new_client(MilvusClient, location, token)
        except StoreUnavailableError:
            # pymilvus shares one connection per server between its clients, and keeps it after
            # they close; when the server has dropped it meanwhile (milvus-lite sends a gRPC
            # GOAWAY, "too_many_pings", to a connection idle for a minute or two), the first new
            # client fails on it and the next gets a new connection (measured on a Lite file and
            # a served binary after 100 s idle). A server that is down fails again. A Lite file
            # is tried again only where this process opened it before (it held it already): the
            # first failure to open one is no dropped connection.
            if holding:
                raise
            client = _new_client(MilvusClient, location, token)
        return client
    except StoreUnavailableError as exc:
        if holding:  # not opened here after all: another process may open it
            _LITE_HOLDS.pop(location).release()
        if is_server_uri(location):
            # pymilvus's own message may quote what it was given: no secret leaves here.
            message = str(exc)
            for secret in (token, _userinfo(location)[1]):
                if secret:
                    message = message.replace(secret, "***")
            raise StoreUnavailableError(message) from None
        # No other softdict process holds it (``_hold_lite_file``): damaged, not a Milvus Lite
        # file, or open in a process that uses milvus-lite without softdict.
        raise StoreUnavailableError(
            f"{exc}. Is it a Milvus Lite file, and whole? A Milvus Lite file is opened by one "
            f"process at a time: if a program other than softdict has it open, close it there"
        ) from None


def _refuse_another_programs_database(location: str, path: Path) -> None:
    """StoreFormatError where ``path`` is an SQLite database that Milvus Lite did not make:
    milvus-lite opened an application's own database (an ``app.db``) and added its tables to
    it (a hostile-input probe found it). An empty file, or one that is no SQLite database, is
    left to milvus-lite, which makes the one and refuses the other."""
    try:
        with path.open("rb") as file:
            if file.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                return
        # Read-only: nothing is written to a file that is not ours.
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            tables = sorted(name for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            ))  # fmt: skip
    except (OSError, sqlite3.Error):
        return  # missing, unreadable, locked or damaged: milvus-lite makes it or says so
    if tables and _LITE_TABLE not in tables:
        shown_tables = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreFormatError(
            f"store='milvus:{location}': {path} is an SQLite database that Milvus Lite did not "
            f"make (its tables: {shown_tables}); softdict does not add Milvus Lite's tables to "
            f"another program's database. Name a file of its own (e.g. milvus:./prices.db)"
        )


def _hold_lite_file(location: str) -> bool:
    """Take this process's hold on the Milvus Lite file ``location`` (a resolved path), for the
    rest of its life, as milvus-lite's server keeps the file (pymilvus never stops it); whether
    it was taken now. StoreUnavailableError where another process holds it.

    milvus-lite locks the file itself, but a process refused by that lock unlinks the lock file
    as its failed server is collected, so its next try opened the file beside the holder and
    both wrote it (a hostile-input probe found it). This lock file is softdict's own."""
    with _LITE_HOLDS_LOCK:  # two threads opening one file: one takes the hold, both use it
        if location in _LITE_HOLDS:
            return False
        path = Path(location)
        hold = FileLock(path.with_name(f".{path.name}.softdict.lock"))
        _take(hold, location)
        _LITE_HOLDS[location] = hold
    return True


def _take(hold: FileLock, location: str) -> None:
    """Take this process's hold on a Lite file; StoreUnavailableError where another has it."""
    try:
        hold.acquire(timeout=0)
    except Timeout:
        raise StoreUnavailableError(
            f"the Milvus Lite file {location} is open in another process. A Milvus Lite file is "
            f"opened by one process at a time: close it there (a process holds it until it "
            f"exits), or share the store through a Milvus server"
        ) from None
    except OSError as exc:  # a folder this process may read but not write
        raise StoreUnavailableError(
            f"cannot open the Milvus Lite file {location}: its lock file cannot be made ({exc})"
        ) from None


def _new_client(client_class: type[MilvusClient], location: str, token: str) -> MilvusClient:
    with translated(shown(location), "connect"):
        return client_class(uri=location, **({"token": token} if token else {}))


def _message(exc: BaseException) -> str:
    return str(getattr(exc, "message", None) or exc).strip()


@contextmanager
def translated(location: str, what: str) -> Iterator[None]:
    """Turn pymilvus and gRPC errors raised inside into softdict errors that say what failed."""
    from pymilvus.exceptions import MilvusException

    try:
        yield
    except MilvusException as exc:
        message = _message(exc)
        if exc.code == _COLLECTION_NOT_FOUND:
            raise CollectionGone(f"Milvus at {location} failed to {what}: {message}") from None
        if exc.code == _UNAVAILABLE or "connect" in message.lower():
            raise StoreUnavailableError(
                f"cannot {what}: the Milvus store at {location} cannot be reached ({message}); "
                f"start the server (or check the URI) and try again"
            ) from None
        raise StoreUnavailableError(f"Milvus at {location} failed to {what}: {message}") from None
    except Exception as exc:
        # grpc.RpcError and the like: anything the transport raises.
        if type(exc).__module__.split(".")[0] in ("grpc", "pymilvus", "milvus_lite"):
            raise StoreUnavailableError(
                f"cannot {what}: the Milvus store at {location} failed ({_message(exc)})"
            ) from None
        raise


def schema_error(location: str, collection: str, problem: str) -> StoreFormatError:
    return StoreFormatError(
        f"the Milvus collection {collection!r} at {location} is not a softdict store: {problem}; "
        f"choose another collection name"
    )
