"""Which encoder a store gets: the one it records, or one that embeds like it.

A store records its encoder's identity (name, dimension, and the embedding of a probe text: its
fingerprint). Opening or loading it checks the encoder given against that record, so keys
embedded by one model are never searched with another's queries.
"""

from __future__ import annotations

import numpy as np

from softdict._errors import EncoderError
from softdict.encoders import EncoderIdentity, TextEncoder, are_variants, resolve_encoder
from softdict.store.base import Store

__all__ = ["matching_encoder", "store_encoder"]

# float32 inference on another CPU can differ in the last bits; a different model differs a lot.
# In units of the fingerprint's length: an encoder whose embeddings are 10^-4 long passed any
# absolute tolerance of that size, whatever model it was.
_FINGERPRINT_TOLERANCE = 1e-3


def matching_encoder(
    recorded: EncoderIdentity, encoder: object, cache_size: int, accept_variant: bool = False
) -> TextEncoder:
    """The encoder to use: the one given, checked against the store's, or the recorded one.

    Another registered variant of the recorded model (the bundled model's float32 and int8) is
    refused by name, since a variant's fingerprint may fall within the tolerance, unless
    ``accept_variant``; then its fingerprint is not compared, only its dimension."""
    expected = f"{recorded.name!r} ({recorded.dim} dims)"
    if encoder is None:
        if not recorded.loadable_by_name:
            raise EncoderError(
                f"this store was built with the encoder {expected}, which softdict cannot load "
                f"by name; pass it: SoftDict.load(path, encoder=...)"
            )
        text_encoder = resolve_encoder(recorded.name, query_cache_size=cache_size)
    else:
        text_encoder = resolve_encoder(encoder, query_cache_size=cache_size)
    # By name only: an object passed as encoder= may be named anything (a model named like the
    # bundled int8 variant is still compared by its fingerprint).
    variant = text_encoder.loadable_by_name and are_variants(recorded.name, text_encoder.name)
    if variant and not accept_variant:
        raise EncoderError(
            f"this store was built with the encoder {recorded.name!r} and is being loaded with "
            f"{text_encoder.name!r}, another variant of the same model: its keys keep the first "
            f"one's embeddings and queries would get the second one's, so scores shift (see the "
            f"README's figures). Load without encoder= to use {recorded.name!r}, or pass "
            f"accept_variant=True to use {text_encoder.name!r} anyway"
        )
    fingerprint = np.asarray(text_encoder.encode_keys([recorded.probe_text])[0], dtype=np.float64)
    saved = np.asarray(recorded.fingerprint, dtype=np.float64)
    if variant and fingerprint.shape == saved.shape:
        return text_encoder
    if variant:
        raise EncoderError(
            f"this store's keys were embedded by {recorded.name!r} in {recorded.dim} dims, and "
            f"{text_encoder.name!r} embeds in {fingerprint.shape[0]}: a variant with another "
            f"dimension cannot answer for them, even with accept_variant=True. Load without "
            f"encoder= to use {recorded.name!r}, or build the store again on {text_encoder.name!r}"
        )
    if fingerprint.shape != saved.shape or not _alike(fingerprint, saved):
        raise EncoderError(
            f"this store expects the encoder {expected}, but {text_encoder.name!r} "
            f"({fingerprint.shape[0]} dims) embeds the probe text differently; its embeddings "
            f"would not match the stored keys. Load with the encoder the store was built with"
        )
    return text_encoder


def _alike(fingerprint: np.ndarray, saved: np.ndarray) -> bool:
    """Whether two fingerprints of one shape are one model's, up to float32 rounding. Two zero
    fingerprints (an encoder that embeds the probe text as nothing) tell nothing: alike."""
    length = max(float(np.linalg.norm(fingerprint)), float(np.linalg.norm(saved)))
    return bool(np.allclose(fingerprint, saved, rtol=0.0, atol=_FINGERPRINT_TOLERANCE * length))


def store_encoder(store: Store, encoder: object, cache_size: int) -> TextEncoder:
    """The encoder of a store just opened: for a store that recorded one (a collection made
    before), the recorded one or one that embeds like it; else ``encoder``, then recorded. A
    store made by this open is dropped again where no encoder comes of it (``Store.abandon``)."""
    try:
        recorded = store.recorded_encoder()
        if recorded is not None:
            return matching_encoder(recorded, encoder, cache_size)
        text_encoder = resolve_encoder(encoder, query_cache_size=cache_size)
        if type(store).record_encoder is not Store.record_encoder:
            store.record_encoder(text_encoder.identity())
        return text_encoder
    except BaseException:
        store.abandon()
        raise
