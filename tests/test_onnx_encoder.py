"""The bundled model on ONNX Runtime (``softdict.encoders.onnx``): the same embeddings as
sentence-transformers on PyTorch, no torch on the lookup path, a safe export cache, and the int8
variant, near float32 and refused in place of it unless asked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pycountry
import pytest
from _plugins import HashingEncoder

from softdict import EncoderError, SoftDict
from softdict.encoders import BUNDLED_INT8_NAME, BUNDLED_MODEL_NAME
from softdict.encoders.onnx import CACHE_ENV_VAR, OnnxEncoder, exported_model
from softdict.encoders.sentence_transformers import bundled_model_path, load_bundled

MODEL_DIR = bundled_model_path()
pytestmark = pytest.mark.skipif(MODEL_DIR is None, reason="needs the bundled model package")


def real_texts() -> list[str]:
    """Short keys and long names from pycountry: names, official names (often a sentence
    long), subdivisions with accents and non-Latin scripts, and the empty string."""
    countries = list(pycountry.countries)[:120]
    texts = [c.name for c in countries]
    texts += [c.official_name for c in countries if hasattr(c, "official_name")]
    texts += [s.name for s in list(pycountry.subdivisions)[:200:5]]
    texts += [language.name for language in list(pycountry.languages)[:60]]
    texts += ["", " ".join(c.name for c in countries[:80])]  # and one past 256 tokens
    return texts


def in_batches(encoder: OnnxEncoder, texts: list[str], size: int = 32) -> np.ndarray:
    """Embeddings in batches as stores make them: one batch of all would pad every text to the
    longest (256 tokens here), several times slower."""
    return np.concatenate([encoder.encode(texts[i : i + size]) for i in range(0, len(texts), size)])


def test_embeddings_equal_sentence_transformers() -> None:
    assert MODEL_DIR is not None
    texts = real_texts()
    onnx = in_batches(OnnxEncoder(MODEL_DIR), texts)
    torch = np.asarray(load_bundled().encode(texts, convert_to_numpy=True))
    assert onnx.shape == torch.shape == (len(texts), 384) and onnx.dtype == np.float32
    cosine = (onnx * torch).sum(1) / np.linalg.norm(onnx, axis=1) / np.linalg.norm(torch, axis=1)
    assert cosine.min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-5)
    # A text alone embeds as it does in a batch (padding does not leak into the mean).
    alone = OnnxEncoder(MODEL_DIR).encode(texts[:3])
    np.testing.assert_allclose(alone, onnx[:3], atol=1e-5)


def test_a_store_saved_on_pytorch_loads_on_onnx_and_answers_the_same(tmp_path: Path) -> None:
    data = {c.name: float(len(c.name)) for c in list(pycountry.countries)[:50]}
    saved = SoftDict(data, encoder=load_bundled())  # the PyTorch path
    expected = saved.lookup(["Germny", "Frnace", "united states"])
    saved.save(tmp_path / "store")
    loaded = SoftDict.load(tmp_path / "store", encoder=BUNDLED_MODEL_NAME)  # ONNX
    assert isinstance(loaded.encoder.encoder, OnnxEncoder)
    again = loaded.lookup(["Germny", "Frnace", "united states"])
    # PyTorch's and ONNX Runtime's kernels agree to cosine 0.99999, not bit for bit.
    np.testing.assert_allclose(again, expected, rtol=1e-4)


def test_the_default_encoder_never_imports_torch() -> None:
    """In a fresh process: import, build, every kind of lookup, save and load on the default
    encoder, and torch is never imported."""
    script = textwrap.dedent(
        """
        import sys, tempfile
        from softdict import SoftDict
        sd = SoftDict({"apple": 10.0, "banana": 5.0, "chair": 2.0})
        sd.update({"pear": 7.0})
        sd.lookup("fruit"); sd.lookup(["fruit", "sofa"]); sd.attend("fruit"); sd.nearest("frut")
        with tempfile.TemporaryDirectory() as folder:
            sd.save(folder + "/s")
            SoftDict.load(folder + "/s").lookup("fruit")
        print("torch" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_two_processes_exporting_at_once_make_one_file_of_each(tmp_path: Path) -> None:
    """Both ask for the int8 file, which is quantised from the float32 export: under the lock,
    one process makes both, and the other finds them."""
    env = {**os.environ, CACHE_ENV_VAR: str(tmp_path / "cache")}
    script = (
        "from softdict.encoders.onnx import exported_model; "
        "from softdict.encoders.sentence_transformers import bundled_model_path; "
        "print(exported_model(bundled_model_path(), 'int8'))"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    paths = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        paths.append(out.strip())
    assert paths[0] == paths[1]
    folder = Path(paths[0]).parent
    files = ["export.json", "export.lock", "model-int8.onnx", "model.onnx"]
    assert sorted(p.name for p in folder.iterdir()) == files
    assert (folder / "model.onnx").stat().st_size > 80_000_000
    assert 10_000_000 < Path(paths[0]).stat().st_size < 40_000_000  # int8 weights: about 1/4


def test_int8_embeds_near_float32_and_finds_the_same_keys() -> None:
    """The quality the README states, as floors: int8 is near float32, not equal to it."""
    assert MODEL_DIR is not None
    texts = real_texts()
    float32 = in_batches(OnnxEncoder(MODEL_DIR), texts)
    int8 = in_batches(OnnxEncoder(MODEL_DIR, "int8"), texts)
    cosine = (float32 * int8).sum(1)
    assert 0.98 <= cosine.mean() < 0.99999 and cosine.min() >= 0.9
    np.testing.assert_allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)
    # Lower-cased country names, one at a time as lookups are, against the names as keys.
    names = [c.name for c in pycountry.countries]
    found = {}
    for variant in ("fp32", "int8"):
        encoder = OnnxEncoder(MODEL_DIR, variant)
        keys = in_batches(encoder, names)
        found[variant] = [int((encoder.encode([n.lower()]) @ keys.T).argmax()) for n in names]
    assert np.mean(np.equal(found["int8"], found["fp32"])) >= 0.95


def test_an_unknown_variant_is_a_clear_error() -> None:
    assert MODEL_DIR is not None
    with pytest.raises(EncoderError, match="fp32, int8"):
        OnnxEncoder(MODEL_DIR, "int4")


@pytest.mark.parametrize(
    ("built_with", "loaded_with"),
    [(BUNDLED_INT8_NAME, BUNDLED_MODEL_NAME), (BUNDLED_MODEL_NAME, BUNDLED_INT8_NAME)],
)
def test_a_store_refuses_the_other_variant_unless_asked(
    tmp_path: Path, built_with: str, loaded_with: str
) -> None:
    data = {c.name: float(len(c.name)) for c in list(pycountry.countries)[:40]}
    SoftDict(data, encoder=built_with).save(tmp_path / "store")
    assert SoftDict.load(tmp_path / "store").encoder.name == built_with  # its own, by default
    with pytest.raises(EncoderError, match="accept_variant=True") as refused:
        SoftDict.load(tmp_path / "store", encoder=loaded_with)
    assert repr(built_with) in str(refused.value) and repr(loaded_with) in str(refused.value)
    accepted = SoftDict.load(tmp_path / "store", encoder=loaded_with, accept_variant=True)
    assert accepted.encoder.name == loaded_with and len(accepted) == 40
    for key in list(data)[::8]:
        assert accepted.nearest(key.lower(), k=1)[0][0] == key
    accepted.save(tmp_path / "store")  # records the variant now in use
    assert SoftDict.load(tmp_path / "store").encoder.name == loaded_with


def test_accept_variant_does_not_admit_another_model(tmp_path: Path) -> None:
    SoftDict({"apple": 1.0}, encoder=BUNDLED_MODEL_NAME).save(tmp_path / "store")
    with pytest.raises(EncoderError, match="embeds the probe text differently"):
        SoftDict.load(tmp_path / "store", encoder=HashingEncoder(), accept_variant=True)


def test_an_unwritable_cache_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert MODEL_DIR is not None
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV_VAR, str(blocker / "cache"))
    with pytest.raises(EncoderError, match=CACHE_ENV_VAR):
        exported_model(MODEL_DIR)


def test_a_damaged_export_is_removed_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache file that is not a model (a crash before the rename cannot leave one; a disk
    fault can) is refused and removed, so the next use exports it again."""
    assert MODEL_DIR is not None
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path))
    from softdict.encoders import onnx

    monkeypatch.setattr(onnx, "_SESSIONS", {})  # as in a fresh process: nothing loaded yet
    folder = tmp_path / "onnx" / onnx._export_key(MODEL_DIR)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(EncoderError, match="exported again"):
        OnnxEncoder(MODEL_DIR)
    assert not (folder / "model.onnx").exists()
