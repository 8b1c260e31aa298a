"""Compressed scores (softdict.index._codes, softdict.index.compressed, softdict._compressed):
the bound on each score's error holds, on random and real-text vectors; full attention read from
the codes stays within the bounds it reports; search stays exact; the codes stay in step with
the rows through inserts, deletes, compaction, saving and loading."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from _support import FakeEncoder, assert_close

from softdict import SoftDict, StoreFormatError
from softdict._attention import softmax
from softdict._config import EXACT_MAX_KEYS
from softdict._files import FileReader
from softdict._lookup import selections
from softdict._similarity import Metric, metric_scores
from softdict.index._codes import CodeLayout, KeyCodes
from softdict.index.compressed import CompressedBackend

N_LARGE = EXACT_MAX_KEYS + 2000  # past the exact path: full attention reads the codes


def unit_rows(n: int, dim: int, seed: int, clusters: int = 50) -> np.ndarray:
    """Unit vectors around ``clusters`` centres, as embeddings of related texts lie."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    X = centres[rng.integers(0, clusters, n)] + 0.5 * rng.standard_normal((n, dim))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def hostile_queries(dim: int, seed: int) -> np.ndarray:
    """Queries of every scale, one of a single huge component, one of zeros."""
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((6, dim)) * np.array([[1e-3], [1.0], [7.0], [1.0], [1.0], [1.0]])
    Q[3] = 0.0
    Q[4, 0] = 300.0
    Q[5] = np.abs(Q[5])
    return Q.astype(np.float32)


def float32_noise(Q: np.ndarray, X: np.ndarray) -> np.ndarray:
    """What a float32 product (an exact score, as softdict computes them everywhere) can be off
    by: a relative 1e-6 of |q|·|k| (``_support``'s tolerances, for sums of a few hundred)."""
    return 1e-6 * np.outer(np.linalg.norm(Q, axis=1), np.linalg.norm(X, axis=1))


def assert_within_bound(codes: KeyCodes, X: np.ndarray, Q: np.ndarray) -> None:
    scores, errors = codes.scores(Q, X)
    exact = Q.astype(np.float64) @ X.astype(np.float64).T
    bound = errors.of()
    assert np.all(np.abs(exact - scores) <= bound + float32_noise(Q, X))
    # Rows scored exactly (after the session was made) have a bound of 0, as have a zero query
    # and a zero key; no other.
    nonzero = np.outer(np.linalg.norm(Q, axis=1) > 0, np.linalg.norm(X, axis=1) > 0)
    sealed = np.arange(len(X)) < codes.sealed
    assert np.array_equal(bound > 0, nonzero & sealed[None, :])
    # The summary the codes keep (made with the session) is what the factors give.
    keys = errors.keys
    assert errors.summary is not None
    assert np.array_equal(errors.largest(), keys.max(axis=1).astype(np.float64))
    zero = np.flatnonzero((keys[0] == 0) & (keys[1] == 0))
    assert np.array_equal(errors.exact_columns(), zero)
    unsummarised = errors.restricted(np.arange(len(X)))
    assert unsummarised.summary is None
    assert np.array_equal(unsummarised.exact_columns(), zero)


@pytest.mark.parametrize(
    ("dim", "bits", "block"),
    [(384, 4, 32), (384, 4, 64), (384, 8, 32), (100, 4, 32), (7, 4, 16), (256, 8, 128)],
)
def test_the_bound_holds_on_random_vectors(dim: int, bits: int, block: int) -> None:
    """Every compressed score is within its bound of the exact inner product: dims that need
    padding, long and zero keys, one-signed blocks, queries of any scale; rows the session holds
    and rows added after it."""
    X = unit_rows(3000, dim, seed=dim + bits)
    X[:10] *= 5.0
    X[10] = 0.0
    X[11] = np.abs(X[11])
    codes = KeyCodes(CodeLayout(dim, bits, block), open_rows=0)
    codes.append(X[:2900])
    codes.append(X[2900:])  # fewer than a sixteenth: scored exactly, outside the session
    assert 0 < codes.sealed < len(X)
    assert_within_bound(codes, X, hostile_queries(dim, seed=1))


@pytest.mark.integration
def test_the_bound_holds_on_real_text(bundled_encoder) -> None:
    """The same on the bundled encoder's embeddings of real place names, where the typical error
    is far below the bound (the components' errors cancel) but the bound must still hold."""
    import pycountry

    names = sorted({s.name for s in pycountry.subdivisions})[:1500]
    X = bundled_encoder.encode_keys(names)
    Q = bundled_encoder.encode_queries([c.name for c in list(pycountry.countries)[:40]])
    for bits in (4, 8):
        codes = KeyCodes(CodeLayout(X.shape[1], bits), open_rows=0)
        codes.append(X)
        assert_within_bound(codes, X, Q)
        scores, errors = codes.scores(Q, X)
        typical = np.abs(Q @ X.T - scores).mean()
        assert typical < errors.of().mean() / 5  # the worst case is far from the typical case


def filled(index: str = "compressed", n: int = N_LARGE, dim: int = 32, **options):
    X = unit_rows(n, dim, seed=3)
    values = np.sin(np.arange(n, dtype=np.float64))
    sd = SoftDict(encoder=FakeEncoder(), index=index, temperature=0.05, **options)
    sd.add_embeddings([f"k{i}" for i in range(n)], X, values)
    return sd, X, values


def exact_weights(sd: SoftDict, Q: np.ndarray, X: np.ndarray) -> np.ndarray:
    prepared = sd.similarity.prepare_queries(Q)
    keys = sd.similarity.prepare_keys(X)
    return softmax(metric_scores(prepared, keys, sd.similarity.metric), sd.temperature)


@pytest.mark.parametrize("similarity", ["cosine", "l2"])
def test_full_attention_from_codes_is_within_the_bounds_it_reports(similarity: str) -> None:
    """Past the exact path the codes are read: the weights are within ``weight_error`` of exact
    attention's (total variation), the value within that times the values' range, and the mass
    of the keys not listed within ``tail_interval``; the best keys carry exact scores."""
    sd, X, values = filled(similarity=similarity)
    Q = unit_rows(20, X.shape[1], seed=11)
    truth = exact_weights(sd, Q, X)
    position = {f"k{i}": i for i in range(len(X))}
    for attention, exact in zip(sd.attend_embeddings(Q), truth):
        listed = np.array([position[key] for key in attention.keys])
        assert listed[0] == np.argmax(exact) and attention.sampled == 0
        # Listed weights against exact ones: the listed part of the total variation.
        assert 0.5 * np.abs(attention.weights - exact[listed]).sum() <= attention.weight_error
        spread = values.max() - values.min()
        assert abs(attention.value - exact @ values) <= attention.weight_error * spread + 1e-12
        outside = 1.0 - exact[listed].sum()
        low, high = attention.tail_interval
        assert low - 1e-12 <= outside <= high + 1e-12 and high == attention.tail_bound
        assert low <= attention.tail_mass <= high
        assert 0 < attention.weight_error < 1


def test_the_mass_outside_the_exact_keys_is_that_of_the_weights_left() -> None:
    """``Selection.tail_mass`` of full attention from codes is the weight of the keys not
    scored exactly, summed with those keys' weights set to 0 and then put back: the sum of a
    copy with them zeroed, and the weights the softmax gave."""
    sd, X, _ = filled()
    Q = unit_rows(6, X.shape[1], seed=13)
    [(_, chosen)] = list(selections(sd._store, Q, None, None))
    assert chosen.score_bounds is not None
    exact = chosen.score_bounds.exact
    assert (chosen.k == exact.sum(axis=1)).all() and (chosen.k > 0).all()
    assert np.array_equal(chosen.tail_mass, np.where(exact, 0.0, chosen.weights).sum(axis=1))
    assert np.array_equal(chosen.weights, softmax(chosen.scores, sd.temperature))


def test_codes_that_err_by_more_than_the_margin_still_find_the_best_key_and_say_so() -> None:
    """Under "dot", codes of vectors of norm 30 err by far more than the head's margin (0.2):
    the best key, left out of the head, kept its compressed score, 10 below its true one, and
    weighed 0, and the bound counted a weight of 0 as surely 0 (a probe: 8 of 200 answers wrong,
    3 with a weight_error of 0). Every key that could be the best is scored exactly now, and the
    bound is taken from the log-weights."""
    rng = np.random.default_rng(0)
    n, dim = N_LARGE, 32
    X = (rng.standard_normal((n, dim)) * 30 / np.sqrt(dim)).astype(np.float32)
    values = rng.standard_normal(n)
    sd = SoftDict(encoder=FakeEncoder(), index="compressed", similarity="dot", temperature=0.05)
    sd.add_embeddings([f"k{i}" for i in range(n)], X, values)
    Q = (rng.standard_normal((40, dim)) * 30 / np.sqrt(dim)).astype(np.float32)
    exact_scores = Q.astype(np.float64) @ X.astype(np.float64).T
    truth = softmax(exact_scores, 0.05)
    # A float32 score of |q|·|k| ~ 900 is off by up to 1e-6 of it: 0.02 of a log-weight here.
    noise = float(float32_noise(Q, X).max()) / 0.05
    for i, attention in enumerate(sd.attend_embeddings(Q)):
        assert attention.keys[0] == f"k{np.argmax(exact_scores[i])}"
        error = abs(attention.value - truth[i] @ values)
        assert error <= (attention.weight_error + 2 * noise) * np.ptp(values)


def test_a_batch_reads_the_codes_once_and_answers_as_one_by_one() -> None:
    sd, X, _ = filled()
    Q = unit_rows(12, X.shape[1], seed=12)
    together = sd.lookup_embeddings(Q)
    one_by_one = np.array([sd.lookup_embeddings(q[None])[0] for q in Q])
    # The int8 kernel may sum a batch in another order than one query: float32 noise only.
    assert_close(together, one_by_one, rtol=1e-4, atol=1e-7)


def test_a_mask_attends_to_the_allowed_keys_only() -> None:
    sd, X, values = filled()
    allowed = [f"k{i}" for i in range(N_LARGE) if i % 10 != 3]
    rows = np.array(sorted(int(key[1:]) for key in allowed))
    assert len(rows) > EXACT_MAX_KEYS  # still past the exact path: the codes are read
    Q = unit_rows(5, X.shape[1], seed=13)
    truth = exact_weights(sd, Q, X[rows])
    for attention, exact in zip(sd.attend_embeddings(Q, mask=allowed), truth):
        assert set(attention.keys) <= set(allowed) and attention.weight_error > 0
        assert abs(attention.value - exact @ values[rows]) <= attention.weight_error * 2 + 1e-12


@pytest.mark.parametrize("top_k", [1, 40, 1024])
def test_top_k_from_the_codes_finds_the_nearest_keys_with_exact_scores(top_k: int) -> None:
    """A search reads the codes, then scores exactly its k + k/2 + 128 best: the keys it returns
    carry their exact scores, best first, and are the true k best but for a rare key whose
    compressed score fell out of the candidates (none here; floors as for HNSW), also after
    deletes."""
    sd, X, _ = filled(top_k=top_k)
    for i in range(0, 3000, 3):
        del sd[f"k{i}"]
    live = np.array([i for i in range(N_LARGE) if i >= 3000 or i % 3])
    position = {f"k{i}": j for j, i in enumerate(live)}
    Q = unit_rows(8, X.shape[1], seed=14)
    exact = metric_scores(
        Q / np.linalg.norm(Q, axis=1, keepdims=True), X[live], Metric.INNER_PRODUCT
    )
    recalls = []
    for attention, row in zip(sd.attend_embeddings(Q), exact):
        best = set(np.argsort(-row, kind="stable")[:top_k].tolist())
        found = [position[key] for key in attention.keys]
        recalls.append(len(best & set(found)) / top_k)
        assert_close(attention.scores, row[found])
        assert np.all(np.diff(attention.scores) <= 0) and attention.weight_error == 0.0
    assert np.mean(recalls) >= 0.99


def assert_codes_in_step(backend: CompressedBackend, X: np.ndarray, live: np.ndarray) -> None:
    """Every live key's compressed score is within its bound of the exact one."""
    Q = unit_rows(4, X.shape[1], seed=15)
    scores, ids, errors = backend.score_approximately(Q)
    np.testing.assert_array_equal(ids, live)
    exact = Q.astype(np.float64) @ X[live].astype(np.float64).T
    assert np.all(np.abs(exact - scores) <= errors.of() + float32_noise(Q, X[live]))


def test_codes_stay_in_step_through_inserts_deletes_compaction_and_saving(tmp_path: Path) -> None:
    X = unit_rows(9000, 24, seed=4)
    backend = CompressedBackend(24, Metric.INNER_PRODUCT, open_rows=500, codes_from=0)
    alive = np.zeros(len(X), dtype=bool)
    rng = np.random.default_rng(5)
    added = 0
    for _ in range(12):
        batch = int(rng.integers(1, 1200))
        ids = np.arange(added, min(added + batch, len(X)))
        backend.add(ids, X[ids])
        alive[ids], added = True, added + len(ids)
        gone = rng.choice(np.flatnonzero(alive), size=int(alive.sum() * 0.3), replace=False)
        backend.remove(gone)  # enough deletes, over the steps, to compact
        alive[gone] = False
        assert_codes_in_step(backend, X, np.flatnonzero(alive))
    dump = backend.dump()
    reader = FileReader(tmp_path, dict(dump.files))
    loaded = CompressedBackend(24, Metric.INNER_PRODUCT, open_rows=500, codes_from=0)
    loaded.restore(dict(dump.meta), reader)
    assert_codes_in_step(loaded, X, np.flatnonzero(alive))
    again = loaded.dump()
    assert again.meta == dump.meta and sorted(again.files) == sorted(dump.files)
    for name, content in dump.files.items():
        np.testing.assert_array_equal(again.files[name], content)
    # Saved without codes (before they existed, or in another layout): made again on load.
    bare = {k: v for k, v in dump.files.items() if "code" not in k}
    rebuilt = CompressedBackend(24, Metric.INNER_PRODUCT, open_rows=500, codes_from=0)
    rebuilt.restore({}, FileReader(tmp_path, bare))
    assert rebuilt.capabilities.approximate_scores
    assert_codes_in_step(rebuilt, X, np.flatnonzero(alive))


def _rewritten(folder: Path, name: str, array: np.ndarray) -> None:
    """``name`` replaced by ``array``, with its size and checksum in the manifest, as a tool that
    rewrites a store's file would."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    (folder / name).write_bytes(buffer.getvalue())
    manifest = json.loads((folder / "manifest.json").read_text())
    entry = {
        "bytes": len(buffer.getvalue()),
        "sha256": hashlib.sha256(buffer.getvalue()).hexdigest(),
    }
    manifest["body"]["files"][name] = entry
    body = json.dumps(manifest["body"], sort_keys=True, ensure_ascii=False).encode()
    manifest["body_sha256"] = hashlib.sha256(body).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("embedding_code_norms.npy", lambda a: -a),
        ("embedding_code_norms.npy", np.zeros_like),
        ("embedding_code_scales.npy", np.zeros_like),
        ("embedding_code_scales.npy", lambda a: a * 10),
        ("embedding_code_zero_points.npy", lambda a: np.full_like(a, 255)),
        ("embedding_codes.npy", lambda a: a[::-1].copy()),
    ],
)
def test_codes_rewritten_with_their_checksums_are_refused(tmp_path: Path, name, change) -> None:
    """Code files rewritten with their checksums (negated norms, zero scales) loaded, and the
    bounds they give were false: a weight_error of 0 on answers 0.009 off (a probe). Rows spread
    over the store are coded again from their vectors on load and compared."""
    sd, _, _ = filled()
    sd.save(tmp_path / "store")
    _rewritten(tmp_path / "store", name, change(np.load(tmp_path / "store" / name)))
    with pytest.raises(StoreFormatError, match=rf"{name} does not hold the codes of the stored"):
        SoftDict.load(tmp_path / "store", encoder=FakeEncoder())


def test_a_saved_store_keeps_its_codes_and_refuses_a_corrupt_one(tmp_path: Path) -> None:
    sd, X, _ = filled()
    Q = unit_rows(3, X.shape[1], seed=16)
    sd.save(tmp_path / "store")
    loaded = SoftDict.load(tmp_path / "store", encoder=FakeEncoder())
    assert loaded.index_description == sd.index_description
    for a, b in zip(sd.attend_embeddings(Q), loaded.attend_embeddings(Q)):
        assert a.keys == b.keys
        assert_close(a.weights, b.weights)
        assert a.weight_error == pytest.approx(b.weight_error, rel=1e-6)
    codes = tmp_path / "store" / "embedding_codes.npy"
    data = bytearray(codes.read_bytes())
    data[-1] ^= 0xFF
    codes.write_bytes(bytes(data))
    with pytest.raises(StoreFormatError, match=r"embedding_codes\.npy fails its SHA-256"):
        SoftDict.load(tmp_path / "store", encoder=FakeEncoder())


def test_up_to_the_exact_path_a_compressed_store_answers_as_flat() -> None:
    """Up to EXACT_MAX_KEYS keys the codes are kept but not read: full attention and searches
    (``top_k``) answer as on "flat"."""
    X = unit_rows(EXACT_MAX_KEYS, 32, seed=6)
    keys = [f"k{i}" for i in range(len(X))]
    Q = unit_rows(5, 32, seed=7)
    for top_k in (None, 5):
        answers = []
        for index in ("compressed", "flat"):
            sd = SoftDict(encoder=FakeEncoder(), index=index, temperature=0.05, top_k=top_k)
            sd.add_embeddings(keys, X, np.arange(len(X), dtype=float))
            answers.append(sd.attend_embeddings(Q))
        for a, b in zip(*answers):
            assert a.keys == b.keys and a.k == b.k and a.weight_error == 0.0
            assert_close(a.weights, b.weights)


def test_the_kernel_takes_the_cores_the_process_may_run_on(monkeypatch) -> None:
    """Its threads follow the process's CPU affinity (a container or taskset may allow one core
    of many), not the machine's count, and never exceed two."""
    import os

    from softdict.index._codes import kernel_threads

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert kernel_threads() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert kernel_threads() == 2
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert kernel_threads() == 2  # no affinity reported: the machine's count
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert kernel_threads() == 1
