"""Static embeddings (``softdict.encoders.static``): the bundled model distilled by model2vec
once per machine and checked before each use, model2vec models passed by object or folder,
and the variant rules of a store built on it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pycountry
import pytest

from softdict import EncoderError, SoftDict
from softdict.encoders import (
    BUNDLED_MODEL_NAME,
    BUNDLED_STATIC_NAME,
    register_encoder_name,
    resolve_encoder,
)
from softdict.encoders.onnx import CACHE_ENV_VAR
from softdict.encoders.sentence_transformers import bundled_model_path
from softdict.encoders.static import STATIC_PCA_DIMS, distilled_model, is_static_folder

MODEL_DIR = bundled_model_path()
pytestmark = [
    pytest.mark.skipif(MODEL_DIR is None, reason="needs the bundled model package"),
    pytest.mark.integration,
]
NAMES = [c.name for c in pycountry.countries]


@pytest.fixture(scope="module")
def static_folder() -> Path:
    """The bundled model's distilled folder in the user's cache (distilled on first use)."""
    assert MODEL_DIR is not None
    return distilled_model(MODEL_DIR)


def test_embeddings_are_unit_float32_and_batching_changes_nothing(static_folder: Path) -> None:
    encoder = resolve_encoder(BUNDLED_STATIC_NAME)
    texts = [*NAMES[:100], "", "Côte d'Ivoire", "日本"]
    whole = encoder.encode_keys(texts, batch_size=256)
    assert whole.shape == (len(texts), STATIC_PCA_DIMS) and whole.dtype == np.float32
    nonzero = np.linalg.norm(whole, axis=1) > 0
    # The distilled table is stored in float16.
    np.testing.assert_allclose(np.linalg.norm(whole[nonzero], axis=1), 1.0, atol=1e-3)
    one_by_one = np.concatenate([encoder.encode_keys([text]) for text in texts])
    np.testing.assert_array_equal(one_by_one, whole)
    assert is_static_folder(static_folder)


def test_a_store_on_it_finds_names_by_spelling_and_meaning(static_folder: Path) -> None:
    sd = SoftDict({c.name: c.alpha_2 for c in pycountry.countries}, encoder=BUNDLED_STATIC_NAME)
    queries = ["Germny", "Frnace", "Untied States", "Brazl", "Swtzerland", "Deutschland"]
    assert sd.lookup(queries) == ["DE", "FR", "US", "BR", "CH", "DE"]


def test_distilled_once_and_reused_by_a_fresh_process(static_folder: Path) -> None:
    """A second process finds the model by its checked files: nothing is distilled again."""
    before = {path.name: path.stat().st_mtime_ns for path in static_folder.iterdir()}
    script = (
        "from softdict import SoftDict; "
        f"print(SoftDict({{'apple': 1.0}}, encoder={BUNDLED_STATIC_NAME!r}).lookup('aple'))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 1.0
    assert {path.name: path.stat().st_mtime_ns for path in static_folder.iterdir()} == before


def _fake_model_dir(tmp_path: Path) -> Path:
    """A folder with the files the cache key is made of, which no distiller can read."""
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"not weights")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_a_sound_cached_model_is_used_and_a_damaged_one_is_never_trusted(
    static_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache entry of a folder that cannot be distilled: a sound copy of a model there is
    used as it is (distilling would fail); after one byte of it changes, it is removed and made
    again (which fails here, with a clear error), never loaded."""
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "cache"))
    fake = _fake_model_dir(tmp_path)
    with pytest.raises(EncoderError, match="distilling the bundled model"):
        distilled_model(fake)
    (entry,) = (tmp_path / "cache" / "static").iterdir()
    assert not (entry / "model").exists()  # the failed attempt left no partial model
    shutil.copytree(static_folder, entry / "model")
    assert distilled_model(fake) == entry / "model"
    weights = entry / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(EncoderError, match="distilling the bundled model"):
        distilled_model(fake)
    assert not (entry / "model").exists()


def test_a_static_model_object_or_folder_is_an_encoder(static_folder: Path) -> None:
    from model2vec import StaticModel

    model = StaticModel.from_pretrained(static_folder)
    by_object = SoftDict({"apple": 1.0, "chair": 2.0}, encoder=model)
    by_folder = SoftDict({"apple": 1.0, "chair": 2.0}, encoder=str(static_folder))
    np.testing.assert_array_equal(
        by_object.encoder.encode_queries(["sofa"]), by_folder.encoder.encode_queries(["sofa"])
    )
    assert by_folder.lookup("sofa") == by_object.lookup("sofa")
    # A name registered to load the model is wrapped as the object is: model2vec's tokenizer
    # refuses two threads at once, and the wrapper takes one call at a time (a bare model
    # failed most lookups from four threads with "Already borrowed").
    register_encoder_name("test-static-by-name", lambda: model)
    by_name = SoftDict({"apple": 1.0, "chair": 2.0}, encoder="test-static-by-name")
    assert type(by_name.encoder.encoder) is type(by_object.encoder.encoder)
    assert by_name.lookup("sofa") == by_object.lookup("sofa")


def test_a_store_built_on_it_refuses_the_transformer(static_folder: Path, tmp_path: Path) -> None:
    """Recorded as a variant of the bundled model: loading with another variant is refused by
    name, and accept_variant cannot join embeddings of two dimensions."""
    sd = SoftDict({"apple": 1.0, "chair": 2.0}, encoder=BUNDLED_STATIC_NAME)
    sd.save(tmp_path / "store")
    assert SoftDict.load(tmp_path / "store").attend("aple").keys[0] == "apple"  # its own, by name
    with pytest.raises(EncoderError, match="another variant"):
        SoftDict.load(tmp_path / "store", encoder=BUNDLED_MODEL_NAME)
    with pytest.raises(EncoderError, match="another dimension"):
        SoftDict.load(tmp_path / "store", encoder=BUNDLED_MODEL_NAME, accept_variant=True)


def test_an_unwritable_cache_says_where_and_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder should go")
    monkeypatch.setenv(CACHE_ENV_VAR, str(blocked))
    with pytest.raises(EncoderError, match=CACHE_ENV_VAR):
        distilled_model(_fake_model_dir(tmp_path))
