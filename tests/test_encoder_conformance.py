"""One encoder contract, run over every encoder softdict ships or is given: the bundled model on
ONNX Runtime, its int8 and static (model2vec) variants, the same model through
sentence-transformers, and the plug-in of tests/_plugins.py. Each embeds n texts as (n, d)
finite float32 with d its stated dimension, batches as it embeds one by one, and keeps one
identity across instances and across a store's save and load. Through the public
``resolve_encoder`` and ``TextEncoder``, as a store uses an encoder."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _plugins import HashingEncoder
from _support import assert_close, close

from softdict import SoftDict
from softdict.encoders import (
    BUNDLED_INT8_NAME,
    BUNDLED_MODEL_NAME,
    BUNDLED_STATIC_NAME,
    PROBE_TEXT,
    TextEncoder,
    resolve_encoder,
)
from softdict.encoders.sentence_transformers import bundled_model_path, load_bundled
from softdict.encoders.static import STATIC_PCA_DIMS

MODEL_DIR = bundled_model_path()
SENTENCE_TRANSFORMERS = "sentence-transformers"
PLUG_IN = "test-hashing"  # tests/_plugins.py's HashingEncoder, registered by this name

# The dimension each encoder states: the model card's 384, the distillation's PCA size, the
# plug-in's class constant.
DIMS = {
    BUNDLED_MODEL_NAME: 384,
    BUNDLED_INT8_NAME: 384,
    BUNDLED_STATIC_NAME: STATIC_PCA_DIMS,
    SENTENCE_TRANSFORMERS: 384,
    PLUG_IN: HashingEncoder.DIM,
}
_REAL = [
    pytest.mark.integration,
    pytest.mark.skipif(MODEL_DIR is None, reason="needs the bundled model package"),
]
ENCODERS = [
    pytest.param(BUNDLED_MODEL_NAME, id="bundled", marks=_REAL),
    pytest.param(BUNDLED_INT8_NAME, id="bundled-int8", marks=_REAL),
    pytest.param(BUNDLED_STATIC_NAME, id="bundled-static", marks=_REAL),
    pytest.param(SENTENCE_TRANSFORMERS, id="sentence-transformers", marks=_REAL),
    pytest.param(PLUG_IN, id="plug-in"),
]

# Short and long texts, accents, non-Latin scripts, the empty string, and a repeat.
TEXTS = [
    "apple",
    "a red fruit that grows on trees in the orchard behind the old farmhouse",
    "Côte d'Ivoire",
    "日本",
    "",
    "Germny",
    "chair",
    "apple",
]


@pytest.fixture(scope="module")
def sentence_transformers_models() -> list[Any]:
    """Two instances of the bundled model as a user holds them: the one softdict shares within
    the process (other tests load it too), and one constructed here."""
    from sentence_transformers import SentenceTransformer

    return [
        load_bundled(),
        SentenceTransformer(str(MODEL_DIR), device="cpu", local_files_only=True),
    ]


@pytest.fixture(params=ENCODERS)
def encoder_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(encoder_name: str, request: pytest.FixtureRequest) -> Callable[[int], object]:
    """``make(i)``: the ``encoder=`` argument for instance ``i`` (0 or 1); a name loads a new
    encoder object each time it is resolved."""
    if encoder_name == SENTENCE_TRANSFORMERS:
        models = request.getfixturevalue("sentence_transformers_models")
        return lambda i=0: models[i]
    return lambda i=0: encoder_name


def test_embeddings_are_n_by_dim_finite_float32(encoder_name: str, make) -> None:
    encoder = resolve_encoder(make())
    dim = DIMS[encoder_name]
    for embeddings in (encoder.encode_keys(TEXTS), encoder.encode_queries(TEXTS)):
        assert embeddings.shape == (len(TEXTS), dim) and embeddings.dtype == np.float32
        assert np.all(np.isfinite(embeddings))
        np.testing.assert_array_equal(embeddings[0], embeddings[-1])  # the same text twice
        assert np.linalg.norm(embeddings[0] - embeddings[1]) > 0  # different texts differ
    assert encoder.dim == dim
    # The object behind the TextEncoder keeps the protocol itself: (n, d) from .encode.
    raw = np.asarray(encoder.encoder.encode(TEXTS[:3]))
    assert raw.shape == (3, dim) and raw.dtype == np.float32


def assert_same_embeddings(encoder_name: str, batched: np.ndarray, alone: np.ndarray) -> None:
    """Batched embeddings against one-by-one ones, as closely as each encoder can keep them."""
    if encoder_name in (BUNDLED_STATIC_NAME, PLUG_IN):
        # A sum over each text's own tokens: no arithmetic crosses texts, so they are equal.
        np.testing.assert_array_equal(batched, alone)
    elif encoder_name == BUNDLED_INT8_NAME:
        # Dynamic quantisation: the int8 scale of each activation is taken over the whole
        # batch, so a text's embedding depends on its batch mates (cosine 0.96 seen for the
        # empty string). Floors as the README states int8 against float32.
        cosine = (batched * alone).sum(axis=1)
        assert cosine.mean() >= 0.98 and cosine.min() >= 0.9
    else:
        # Float32 transformers: padding to the batch's longest text changes the order of the
        # sums in attention and pooling (2e-7 seen), as tests/test_onnx_encoder.py allows.
        assert_close(batched, alone, rtol=0, atol=1e-5)


def test_batching_equals_one_by_one(encoder_name: str, make) -> None:
    encoder = resolve_encoder(make(), query_cache_size=0)  # every query really embedded
    keys_alone = np.concatenate([encoder.encode_keys([text]) for text in TEXTS])
    queries_alone = np.concatenate([encoder.encode_queries([text]) for text in TEXTS])
    for batch_size in (3, 64):  # several batches, longest texts first; then one batch
        keys = encoder.encode_keys(TEXTS, batch_size=batch_size)
        assert_same_embeddings(encoder_name, keys, keys_alone)
        queries = encoder.encode_queries(TEXTS, batch_size=batch_size)
        assert_same_embeddings(encoder_name, queries, queries_alone)


def test_threads_encode_at_once(encoder_name: str, make) -> None:
    """docs/guarantees.md: lookups and inserts encode in parallel, so one encoder object must
    take calls from several threads at once (a tokenizer's Rust object refuses a second borrow:
    "Already borrowed"), and each call gets its own texts' embeddings."""
    encoder = resolve_encoder(make(), query_cache_size=0)
    texts = [f"{word} {i}" for i, word in enumerate(TEXTS * 40)]
    expected = encoder.encode_queries(texts, batch_size=8)
    parts = [texts[start::4] for start in range(4)]
    barrier = threading.Barrier(len(parts))
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def encode(part: int) -> None:
        try:
            barrier.wait()
            for _ in range(3):
                results[part] = encoder.encode_queries(parts[part], batch_size=8)
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=encode, args=(part,)) for part in range(len(parts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for start in range(4):
        assert_same_embeddings(encoder_name, results[start], expected[start::4])


def test_an_empty_list_gives_no_rows_of_the_dimension(encoder_name: str, make) -> None:
    encoder = resolve_encoder(make())
    encoder.encode_keys(TEXTS[:2])
    for empty in (encoder.encode_keys([]), encoder.encode_queries([])):
        assert empty.shape == (0, DIMS[encoder_name]) and empty.dtype == np.float32


def test_an_empty_batch_has_the_dimension_before_any_text_is_embedded() -> None:
    """A store filled by add_embeddings has not embedded a text yet; an empty batch lookup
    should answer like the same lookup after one text was embedded: no rows."""
    plug_in = HashingEncoder()
    sd = SoftDict(encoder=PLUG_IN)
    sd.add_embeddings(["apple", "chair"], plug_in.encode(["apple", "chair"]), [1.0, 2.0])
    assert sd.encoder.encode_queries([]).shape == (0, HashingEncoder.DIM)
    answer = sd.lookup([])
    assert isinstance(answer, np.ndarray) and answer.shape == (0,)


def assert_same_identity(a: TextEncoder, b: TextEncoder, encoder_name: str) -> None:
    first, second = a.identity(), b.identity()
    assert (first.name, first.dim, first.loadable_by_name, first.probe_text) == (
        second.name,
        second.dim,
        second.loadable_by_name,
        second.probe_text,
    )
    assert first.dim == DIMS[encoder_name] and first.probe_text == PROBE_TEXT
    assert_close(first.fingerprint, second.fingerprint)
    # The fingerprint is the encoder's embedding of the probe text, as a key.
    assert_close(first.fingerprint, b.encode_keys([PROBE_TEXT])[0])


def test_identity_is_the_same_for_two_instances(encoder_name: str, make) -> None:
    a, b = resolve_encoder(make(0)), resolve_encoder(make(1))
    assert a.encoder is not b.encoder
    assert_same_identity(a, b, encoder_name)
    # A name loads the same encoder again; an object is recorded by what it is.
    if encoder_name == SENTENCE_TRANSFORMERS:
        assert a.name == "SentenceTransformer" and not a.loadable_by_name
    else:
        assert a.name == encoder_name and a.loadable_by_name


def test_identity_survives_a_stores_save_and_load(encoder_name: str, make, tmp_path: Path) -> None:
    sd = SoftDict({"apple": 1.0, "chair": 2.0, "red apple": 3.0}, encoder=make(0))
    sd.save(tmp_path / "store")
    if sd.encoder.loadable_by_name:
        loaded = SoftDict.load(tmp_path / "store")  # by the name the store recorded
    else:
        loaded = SoftDict.load(tmp_path / "store", encoder=make(1))
    assert loaded.encoder is not sd.encoder
    assert_same_identity(sd.encoder, loaded.encoder, encoder_name)
    for query in ("fruit", "aple", "sofa"):
        assert loaded.lookup(query) == close(sd.lookup(query))
