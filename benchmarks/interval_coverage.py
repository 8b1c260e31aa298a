"""Whether estimated full attention's intervals hold at their confidence: each query sampled
many times, on real text, against exact attention.

Run:  pip install -e '.[bench]' && python benchmarks/interval_coverage.py [--sizes 1000000]
      [--corpora words places] [--indexes projected auto] [--auto-store PATH]
      [--replicates 40] [--out benchmarks/results_interval_coverage.md] [--append]

WHY: past 150,000 keys a lookup estimates full attention from an exact head and a sample of the
other keys (``softdict._sampling``) and reports ``tail_interval``, the interval on the tail's
mass at 95% confidence. ``real_scale.py`` and ``proxy_proposal.py`` check it with one sample a
query, 200 queries: a coverage of 0.92 there could be 0.95 (its standard error is 0.015), and
the same design read 0.920 in one run and 0.965 in another. Here every query draws
``--replicates`` samples (``SoftDict``'s ``seed``, which seeds each query's generator, set to
0, 1, 2, ...), so coverage is read over 200 x replicates intervals, and which way the misses
fall says whether the interval is too narrow or sits too low.

DATA, QUERIES: as ``real_scale.py`` (the same corpora, the same 200 held-out keys, T = 0.05).
The stores are built as there (``lexical=0``, default options: ``max_k`` 1,024, the sample by
softdict's tolerance rule); ``--auto-store`` loads a saved ``"auto"`` store of the same keys
instead of building its HNSW graph.

COLUMNS, per index, over every query and replicate:

* tail cover: share of intervals that hold the true tail mass (1 − exact attention's weights of
  the head's keys); above / below: the share where it lies above the interval (the estimate too
  low) or below it;
* "as reported": the interval the lookup reports, t̂ ± z·se (clipped to [0, 1]); "logit": the
  same estimate and standard error on the log-odds scale, logit(t̂) ± z·se/(t̂(1 − t̂)), mapped
  back. The tail mass is Ẑ_tail/(W_head + Ẑ_tail), so its log-odds are log Ẑ_tail − log W_head,
  and this is the delta method's interval for log Ẑ_tail: for a positive estimate whose
  spread is skewed to the right (a sample that misses a heavy key reads too low, with too small
  a spread), it reaches further up than down;
* mean width of each interval; queries whose intervals held less than 80% of the time;
* value cover: share of value components within z·``value_stderr`` of exact attention's;
  rel. error: mean ||y − y_exact|| / ||y_exact||; m: sampled keys a query, mean.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_scale as rs

from softdict import SoftDict
from softdict._sampling import z_of

CONFIDENCE = 0.95


def logit_interval(tail: np.ndarray, stderr: np.ndarray, z: float) -> np.ndarray:
    """(q, 2): the log-odds interval of the module docstring, where 0 < t̂ < 1 and se > 0;
    t̂ ± z·se (clipped) elsewhere."""
    low = np.clip(tail - z * stderr, 0.0, 1.0)
    high = np.clip(tail + z * stderr, 0.0, 1.0)
    inner = (tail > 0) & (tail < 1) & (stderr > 0)
    t = tail[inner]
    odds = t / (1 - t)
    spread = np.exp(z * stderr[inner] / (t * (1 - t)))
    low[inner] = odds / spread / (1 + odds / spread)
    with np.errstate(over="ignore", invalid="ignore"):
        up = odds * spread
        high[inner] = np.where(np.isfinite(up), up / (1 + up), 1.0)
    return np.stack([low, high], axis=1)


def coverage(true_tail: np.ndarray, intervals: np.ndarray) -> tuple[float, float, float, float]:
    """(cover, above, below, mean width) of intervals (..., 2) against ``true_tail`` (...)."""
    low, high = intervals[..., 0], intervals[..., 1]
    above = true_tail > high + 1e-9
    below = true_tail < low - 1e-9
    return (
        float(np.mean(~above & ~below)),
        float(np.mean(above)),
        float(np.mean(below)),
        float(np.mean(high - low)),
    )


def measure(
    corpus_name: str, n: int, indexes: list[str], replicates: int, auto_store: Path | None
) -> str:
    began_all = time.perf_counter()
    split = rs.HeldOut.of(corpus_name, n)
    keys, vectors, values, queries = split.keys, split.vectors, split.values, split.queries
    gc.collect()
    ref = rs.reference(vectors, values, queries)
    position = {key: i for i, key in enumerate(keys)}
    norm = np.linalg.norm(ref.values, axis=1)
    z = z_of(CONFIDENCE)
    print(f"{corpus_name} n={n:,}: reference ready", flush=True)
    lines = [
        f"{len(keys):,} keys stored, {rs.N_QUERIES} held out as queries, {replicates} samples "
        f"of each (seeds 0 to {replicates - 1}); T = {rs.T}; 95% intervals.",
        "",
        "| index | interval | tail cover | above | below | mean width | queries held < 80% "
        "| value cover | rel. error | m |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for index in indexes:
        gc.collect()
        if index == "auto" and auto_store is not None:
            sd = SoftDict.load(auto_store)
            assert len(sd) == len(keys)
        else:
            sd = rs.build_store(index, keys, vectors, values)[0]
        built = sd._store.config
        true_tail = np.empty((replicates, len(queries)))
        tails = np.empty_like(true_tail)
        stderr = np.empty_like(true_tail)
        value_cover, errors, sampled = [], [], []
        for r in range(replicates):
            sd._store.config = built.replace(seed=r)
            for i, a in enumerate(sd.attend_embeddings(queries)):
                if a.tail_interval is None or not a.sampled:
                    raise SystemExit(f"{index}: query {i} was not estimated; nothing to cover")
                head = np.array([position[k] for k in a.keys], dtype=np.int64)
                true_tail[r, i] = 1.0 - float(ref.weights[i, head].sum(dtype=np.float64))
                tails[r, i] = a.tail_mass
                # The reported interval is t̂ ± z·se, clipped: its upper side gives se.
                stderr[r, i] = (a.tail_interval[1] - a.tail_mass) / z
                value = np.asarray(a.value, dtype=np.float64)
                spread = z * np.asarray(a.value_stderr, dtype=np.float64)
                value_cover.append(np.mean(np.abs(value - ref.values[i]) <= spread + 1e-12))
                errors.append(np.linalg.norm(value - ref.values[i]) / norm[i])
                sampled.append(a.sampled)
        sd._store.config = built
        reported = np.stack(
            [np.clip(tails - z * stderr, 0, 1), np.clip(tails + z * stderr, 0, 1)], axis=-1
        )
        logit = logit_interval(tails.ravel(), stderr.ravel(), z).reshape(reported.shape)
        for name, intervals in (("as reported", reported), ("logit", logit)):
            cover, above, below, width = coverage(true_tail, intervals)
            per_query = np.mean(
                (intervals[..., 0] - 1e-9 <= true_tail) & (true_tail <= intervals[..., 1] + 1e-9),
                axis=0,
            )
            lines.append(
                f"| {index} | {name} | {cover:.3f} | {above:.3f} | {below:.3f} | {width:.4f} "
                f"| {int(np.sum(per_query < 0.8))} | {np.mean(value_cover):.3f} "
                f"| {np.mean(errors):.2%} | {np.mean(sampled):,.0f} |"
            )
        print("\n".join(lines[-2:]), flush=True)
        del sd
    lines += ["", f"Run time for this section: {time.perf_counter() - began_all:.0f} s."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = rs.study_parser(__doc__.split("\n")[0], "benchmarks/results_interval_coverage.md")
    parser.add_argument(
        "--indexes", nargs="+", default=["projected", "auto"], choices=["projected", "auto"]
    )
    parser.add_argument("--replicates", type=int, default=40)
    args = parser.parse_args()
    header = (
        "# Whether estimated full attention's intervals hold\n\nProduced by "
        "`benchmarks/interval_coverage.py` (its docstring defines the data and the columns).\n"
    )

    def study(name: str, n: int, saved: Path | None) -> str:
        return measure(name, n, args.indexes, args.replicates, saved)

    rs.run_study(args, study, "interval_coverage.py", header)


if __name__ == "__main__":
    main()
