"""The encoder protocol, and the identity a saved store records of its encoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["PROBE_TEXT", "Encoder", "EncoderIdentity"]

# The encoder's fingerprint is its embedding of this text, recorded at save and compared at load.
PROBE_TEXT = "softdict encoder fingerprint: a quick brown fox jumps over the lazy dog"


@runtime_checkable
class Encoder(Protocol):
    """Anything that maps a list of texts to an (n, d) array of embeddings.

    An encoder may also define ``encode_query(texts)`` and ``encode_document(texts)``; softdict
    then embeds queries and keys with them, for models trained with query and passage prompts.
    """

    def encode(self, texts: list[str]) -> Any: ...


@dataclass(frozen=True)
class EncoderIdentity:
    """What a saved store records of its encoder, to reload it and to refuse a different one.

    Attributes:
        name: the encoder's name (a model name or path, or the object's ``name``).
        dim: the embedding dimension.
        loadable_by_name: whether ``name`` alone loads this encoder again.
        probe_text, fingerprint: the encoder's embedding of a fixed text.
    """

    name: str
    dim: int
    loadable_by_name: bool
    probe_text: str
    fingerprint: tuple[float, ...]
