"""Milvus Lite for the tests marked ``milvus``: embedded (a .db file, which pymilvus opens through
milvus-lite) and served (milvus-lite's binary on a loopback port, reached over gRPC exactly as a
cluster is). No network: the server listens on 127.0.0.1 only."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

_NAMES = itertools.count()


def fresh_collection(prefix: str = "t") -> str:
    """A collection name no other test uses (Milvus names: letters, digits, underscores)."""
    return f"{prefix}_{os.getpid()}_{next(_NAMES)}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class MilvusServer:
    """milvus-lite's server binary serving ``db_file`` on ``port``, stopped by PID."""

    db_file: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> MilvusServer:
        import milvus_lite
        from pymilvus import MilvusClient

        lib = Path(milvus_lite.__file__).parent / "lib"
        self.port = self.port or _free_port()
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib)}
        self.process = subprocess.Popen(
            [str(lib / "milvus"), str(self.db_file), f"127.0.0.1:{self.port}", "ERROR"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                MilvusClient(self.uri, timeout=2).close()
                return self
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"milvus-lite's server did not start on {self.uri}"
                    ) from None
                time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


MILVUS_KINDS = [
    pytest.param("milvus-lite", marks=pytest.mark.milvus),
    pytest.param("milvus-served", marks=pytest.mark.milvus),
]


def milvus_location(request: pytest.FixtureRequest, kind: str) -> str:
    """Where a Milvus store of ``kind`` lives: the session's Milvus Lite file ("milvus-lite"),
    or the served binary's URI ("milvus-served")."""
    if kind == "milvus-lite":
        return "milvus:" + request.getfixturevalue("milvus_lite_file")
    return "milvus:" + request.getfixturevalue("milvus_server").uri


_CLIENTS: dict[str, object] = {}


def register_milvus_backend(name: str, location: str) -> None:
    """Make ``index=name`` create a ``MilvusBackend`` on a new collection at ``location``
    ("milvus:..."), for the backend conformance suite."""
    from softdict.index import register_backend
    from softdict.store.milvus import MilvusBackend
    from softdict.store.milvus._client import connect
    from softdict.store.milvus._collection import KeyRows

    where = location.removeprefix("milvus:")
    if where not in _CLIENTS:
        _CLIENTS[where] = connect(where)
    client = _CLIENTS[where]

    def create(dim, metric):  # type: ignore[no-untyped-def]
        rows = KeyRows(client, where, fresh_collection("backend"), dim, metric)  # type: ignore[arg-type]
        rows.create()
        return MilvusBackend(rows)

    register_backend(name, create)
