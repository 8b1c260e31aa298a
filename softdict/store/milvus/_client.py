"""The pymilvus client as softdict uses it: connecting, turning its errors into softdict's, and
keeping every request within the limits a Milvus cluster enforces (Milvus Lite 2.5 enforces
them too, so the tests meet them where a cluster would).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

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
# pymilvus's status code for a server it cannot reach.
_UNAVAILABLE = 2
# The environment variable that holds a server's token (an API key, or "user:password"), for
# servers and clusters with authentication on: kept out of code, URIs and messages. A URI's own
# "https://user:password@host:19530" works too (pymilvus reads it); messages hide the password.
TOKEN_VARIABLE = "SOFTDICT_MILVUS_TOKEN"


# The Milvus Lite files (resolved paths) this process has opened: milvus-lite serves each from a
# process of its own, started by the first open.
_LITE_FILES_OPENED: set[str] = set()


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


def connect(location: str) -> MilvusClient:
    """A client for ``location``: a server's URI (``http://host:19530``) or the path of a Milvus
    Lite file (``./prices.db``), which Milvus Lite opens in a process of its own."""
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
        if path.suffix != ".db":
            raise ConfigError(
                f"store='milvus:{location}': a Milvus Lite file name must end in .db "
                f"(e.g. milvus:./prices.db); a server is named by its URI (milvus:http://...)"
            )
        if not path.parent.is_dir():
            raise ConfigError(f"store='milvus:{location}': the folder {path.parent} does not exist")
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
    token = os.environ.get(TOKEN_VARIABLE, "") if is_server_uri(location) else ""
    try:
        try:
            client = _new_client(MilvusClient, location, token)
        except StoreUnavailableError:
            # pymilvus shares one connection per server between its clients, and keeps it after
            # they close; when the server has dropped it meanwhile (milvus-lite sends a gRPC
            # GOAWAY, "too_many_pings", to a connection idle for a minute or two), the first new
            # client fails on it and the next gets a new connection (measured on a Lite file and
            # a served binary after 100 s idle). A server that is down fails again. A Lite file
            # is tried again only where this process opened it before: the first failure to
            # open one is another process holding it, and a second try got past that.
            if not (is_server_uri(location) or location in _LITE_FILES_OPENED):
                raise
            client = _new_client(MilvusClient, location, token)
        if not is_server_uri(location):
            _LITE_FILES_OPENED.add(location)
        return client
    except StoreUnavailableError as exc:
        if is_server_uri(location):
            # pymilvus's own message may quote what it was given: no secret leaves here.
            message = str(exc)
            for secret in (token, _userinfo(location)[1]):
                if secret:
                    message = message.replace(secret, "***")
            raise StoreUnavailableError(message) from None
        raise StoreUnavailableError(
            f"{exc}. A Milvus Lite file is opened by one process at a time: if another has it "
            f"open, close it there, or share the store through a Milvus server"
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
