"""The ``softdict`` command line: build a store from a table, query it, describe it.

    softdict build FILE --key COL --value COL [--value COL ...] -o STORE
    softdict query STORE TEXT [--explain] [--json] [--top N] [--min-score S]
    softdict info STORE

The input file is read and checked (columns, emptiness, JSON syntax) before the encoder loads, so
a bad file fails in a moment with a message that names the problem.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from softdict._errors import SoftDictError

__all__ = ["main"]

_BAR_WIDTH = 40


class InputError(Exception):
    """A problem with the command's input file or arguments."""


def _read_rows(path: Path, fmt: str | None) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    fmt = fmt or {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}.get(
        path.suffix.lower()
    )
    if fmt is None:
        raise InputError(f"{path}: unknown format; name it .csv, .json or .jsonl, or pass --format")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc})") from None
    rows: list[Any]
    if fmt == "csv":
        rows = list(csv.DictReader(text.splitlines()))
    elif fmt == "json":
        try:
            rows = json.loads(text) if text.strip() else []
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
        if not isinstance(rows, list):
            raise InputError(f"{path}: a JSON file must hold a list of objects")
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}: invalid JSON on line {number}: {exc.msg}") from None
    if not rows:
        raise InputError(f"{path}: the file has no rows")
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise InputError(f"{path}: row {number} is not an object with named columns")
    return rows


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def _items(rows: list[dict[str, Any]], path: Path, key: str, columns: list[str]) -> dict[str, Any]:
    available = list(rows[0])
    for column in [key, *columns]:
        if column not in available:
            raise InputError(
                f"{path}: no column {column!r}; the columns are {', '.join(map(repr, available))}"
            )
    raw = [[row.get(c) for c in columns] for row in rows]
    # CSV cells are text: a column whose cells all read as numbers holds numbers.
    if all(isinstance(cell, str) or cell is None for values in raw for cell in values):
        parsed = [
            [_number(cell) if isinstance(cell, str) else None for cell in values] for values in raw
        ]
        if all(cell is not None for values in parsed for cell in values):
            raw = parsed
    items: dict[str, Any] = {}
    for number, (row, values) in enumerate(zip(rows, raw), start=1):
        name = row.get(key)
        if not isinstance(name, str) or not name:
            raise InputError(f"{path}: row {number} has no text in the key column {key!r}")
        if len(columns) == 1:
            items[name] = values[0]
        else:
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                raise InputError(
                    f"{path}: row {number}: several --value columns make a vector, so they must "
                    f"all hold numbers; got {values!r}"
                )
            items[name] = values
    return items


def _build(args: argparse.Namespace) -> int:
    from softdict import SoftDict, ValueKind

    path = Path(args.file)
    items = _items(_read_rows(path, args.format), path, args.key, args.value)
    sd = SoftDict(
        encoder=args.encoder,
        index=args.index,
        value_kind=args.value_kind,
        progress=True if sys.stderr.isatty() else None,
    )
    sd.update(items)
    sd.save(args.output)
    kind = sd.value_kind
    kind_name = kind.value if isinstance(kind, ValueKind) else kind  # a plug-in kind is a str
    print(
        f"built {args.output}: {len(sd)} keys, {kind_name or '-'} values, encoder {sd.encoder.name}"
    )
    return 0


def _query(args: argparse.Namespace) -> int:
    import numpy as np

    from softdict import SoftDict

    sd = SoftDict.load(args.store)
    attention = sd.attend(args.text)  # the value, the keys and the best score, in one search
    if args.min_score is not None and attention.scores[0] < args.min_score:
        print(f"no match: no key scored at least {args.min_score}", file=sys.stderr)
        return 3
    shown = list(zip(attention.keys, attention.weights, attention.scores))[: args.top]
    value = attention.value
    plain = value.tolist() if isinstance(value, np.ndarray) else value
    if args.json:
        print(
            json.dumps(
                {
                    "query": args.text,
                    "value": plain,
                    "k": attention.k,
                    "tail_mass": attention.tail_mass,
                    "keys": [
                        {"key": k, "weight": float(w), "score": float(s)} for k, w, s in shown
                    ],
                },
                ensure_ascii=False,
            )
        )
        return 0
    print(json.dumps(plain, ensure_ascii=False) if not isinstance(plain, float) else f"{plain:.6g}")
    if args.explain:
        width = max(len(k) for k, _, _ in shown)
        for key, weight, score in shown:
            bar = "█" * round(weight * _BAR_WIDTH)
            print(f"  {key:<{width}}  {weight:6.1%}  {bar}  (score {score:.3f})")
        print(f"  attention over {attention.k} keys; at most {attention.tail_mass:.2%} left out")
    return 0


def _info(args: argparse.Namespace) -> int:
    from softdict._manifest import FORMAT_NAME, MANIFEST, read_manifest

    folder = Path(args.store)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such store folder")
    manifest = read_manifest(folder)
    body, config = manifest.body, manifest.body.config
    temperature = config.temperature if config.temperature is not None else "default"
    print(f"store        {folder}")
    print(f"format       {FORMAT_NAME} version {manifest.version}")
    print(f"keys         {body.count}")
    print(f"values       {body.value_kind or '-'}")
    print(f"encoder      {body.encoder.name} ({body.encoder.dim} dims)")
    print(f"similarity   {config.similarity.value}, temperature {temperature}")
    print(f"index        {config.index}")
    total = sum(f.bytes for f in body.files.values()) + (folder / MANIFEST).stat().st_size
    print(f"files        {len(body.files) + 1}, {total:,} bytes")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="softdict", description="A dictionary whose lookups go by meaning."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build", help="build a store from a CSV, JSON or JSON Lines file")
    build.add_argument("file")
    build.add_argument("--key", required=True, help="the column holding the keys (text)")
    build.add_argument(
        "--value",
        required=True,
        action="append",
        help="the value column; repeat it to make vector values",
    )
    build.add_argument("-o", "--output", required=True, help="the store folder to write")
    build.add_argument("--format", choices=["csv", "json", "jsonl"], help="default: by extension")
    build.add_argument("--encoder", default=None, help="model name or path (default: bundled)")
    build.add_argument("--index", default="auto")
    build.add_argument("--value-kind", choices=["scalar", "vector", "categorical"], default=None)
    build.set_defaults(run=_build)

    query = commands.add_parser("query", help="look a text up in a store")
    query.add_argument("store")
    query.add_argument("text")
    query.add_argument("--explain", action="store_true", help="show keys and weights as bars")
    query.add_argument("--json", action="store_true", help="print one JSON object")
    query.add_argument("--top", type=int, default=5, help="how many keys to show (default 5)")
    query.add_argument("--min-score", type=float, default=None, help="below it: no match (exit 3)")
    query.set_defaults(run=_query)

    info = commands.add_parser("info", help="describe a store")
    info.add_argument("store")
    info.set_defaults(run=_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 error, 2 usage, 3 no match)."""
    args = _parser().parse_args(argv)
    if getattr(args, "top", 1) < 1:
        print("softdict: error: --top must be at least 1", file=sys.stderr)
        return 2
    try:
        return int(args.run(args))
    except (InputError, SoftDictError) as exc:
        print(f"softdict: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
