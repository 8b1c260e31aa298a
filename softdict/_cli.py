"""The ``softdict`` command line: build a store from a table, query it, describe it.

    softdict build FILE --key COL --value COL [--value COL ...] -o STORE [--force]
                  [--skip-bad-rows] [--on-duplicate last|first|error]
    softdict query STORE (TEXT | --file FILE) [--explain] [--json] [--top N]
                  [--min-score S] [--temperature T] [--lexical W]
    softdict info STORE

STORE is a store folder, or a store in Milvus, ``milvus:PATH.db`` (a Milvus Lite file) or
``milvus:http://host:19530``, with ``--collection NAME``.

The input file is read and checked (``_tables``) before the encoder loads, so a bad file fails in
a moment with a message that names the line. Exit status: 0 ok, 1 error, 2 usage, 3 no match.
No input, however broken, ends in a traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from softdict._cli_report import printed, report
from softdict._config import CombinationName, SoftDictConfig
from softdict._errors import SoftDictError
from softdict._tables import InputError, read_items, read_queries, read_table

__all__ = ["main"]

NO_MATCH = 3
# Queries explained (--explain, --json, --min-score) in one batch.
_ATTEND_BATCH = 1024


def _build(args: argparse.Namespace) -> int:
    from softdict import SoftDict, ValueKind
    from softdict._manifest import replacing_refused

    path, remote = Path(args.file), _remote(args.output, args.collection)
    refused = None if remote else replacing_refused(Path(args.output))
    if refused:  # before the table is read and encoded
        raise InputError(
            f"cannot build into {args.output}: {refused}, and building replaces the whole "
            f"folder; choose another -o, or move what it holds out first"
        )
    read = read_items(
        read_table(path, args.format),
        args.key,
        args.value,
        value_kind=args.value_kind,
        skip_bad_rows=args.skip_bad_rows,
        on_duplicate=args.on_duplicate,
    )
    if not read.items:
        raise InputError(f"{path}: every row was left out ({read.skipped[0]}); nothing to build")
    # Only the options typed: an existing (empty) collection keeps its others.
    typed = {"index": args.index, "combination": args.combination}
    sd = SoftDict(
        encoder=args.encoder,
        **{name: value for name, value in typed.items() if value is not None},
        value_kind=read.value_kind,
        progress=True if sys.stderr.isatty() else None,
        store=remote.get("store", "memory"),
        collection=remote.get("collection"),
    )
    if remote and len(sd):
        raise InputError(
            f"{args.output} already holds a store of {len(sd)} keys in the collection "
            f"{args.collection!r}; build into a new collection (--force replaces store folders "
            f"only)"
        )
    try:
        if remote and args.combination is not None:  # an empty collection made before keeps
            sd.combination = args.combination  # its own unless set: written to the store
        sd.update(read.items)
    except BaseException:  # a Milvus collection this build made goes again (Ctrl-C too)
        sd._abandon()
        raise
    if not remote:  # without --force, a store saved at -o while this ran is not replaced either
        sd.save(args.output, replace=args.force)
    kind = sd.value_kind
    kind_name = kind.value if isinstance(kind, ValueKind) else kind  # a plug-in kind is a str
    print(
        f"built {args.output}: {len(sd)} keys, {kind_name or '-'} values, encoder {sd.encoder.name}"
    )
    if read.skipped:
        print(
            f"softdict: left out {len(read.skipped)} rows whose number cells hold no value "
            f"(--skip-bad-rows), the first at {read.skipped[0]}",
            file=sys.stderr,
        )
    twins = _unicode_twins(list(read.items))
    if twins:  # a dict keeps them apart, as it should; a person typing them cannot
        print(
            f"softdict: {len(twins)} keys are another key in another Unicode form (the first: "
            f"{twins[0][0]!a} and {twins[0][1]!a}); lookups split between them: "
            f"normalise the table to NFC to make each one key",
            file=sys.stderr,
        )
    if read.duplicates:
        kept = "first" if args.on_duplicate == "first" else "last"
        print(
            f"softdict: {len(read.duplicates)} rows repeat a key (the first: "
            f"{read.duplicates[0]}); kept the {kept} value of each (--on-duplicate)",
            file=sys.stderr,
        )
    return 0


def _unicode_twins(keys: list[str]) -> list[tuple[str, str]]:
    """Pairs of keys that are one text in two Unicode normal forms (NFC and NFD "Café"): the
    first key of each such text, and each later one."""
    first: dict[str, str] = {}
    twins = []
    for key in keys:
        normal = unicodedata.normalize("NFC", key)
        if first.setdefault(normal, key) != key:
            twins.append((first[normal], key))
    return twins


def _remote(store: str, collection: str | None) -> dict[str, str]:
    """The SoftDict options of a store kept in a database (``milvus:...``), or {} for a folder."""
    if store.startswith("milvus:"):
        if not collection:
            raise InputError(f"{store} is a Milvus store: name its collection with --collection")
        return {"store": store, "collection": collection}
    if collection:
        raise InputError(
            f"--collection names a collection of a Milvus store (milvus:...), and {store} is a "
            f"store folder"
        )
    return {}


def _open(args: argparse.Namespace) -> Any:
    """The store, with query's --temperature and --lexical for this command alone: set on a
    Milvus store they were written to it for every later reader, even by a query that failed
    (a probe). Checked before the store and its encoder load."""
    from softdict import SoftDict

    named = {name: getattr(args, name, None) for name in ("temperature", "lexical")}
    options = {name: value for name, value in named.items() if value is not None}
    SoftDictConfig.build(**options)  # ConfigError for a bad one
    remote = _remote(args.store, args.collection)
    if remote:
        return SoftDict.open(remote["store"], collection=remote["collection"], **options)
    sd = SoftDict.load(args.store)
    for name, value in options.items():  # a folder's store is in memory: nothing is written
        setattr(sd, name, value)
    return sd


def _query(args: argparse.Namespace) -> int:
    # main() made sure there is one of TEXT and --file.
    if args.text is not None:
        try:  # the shell's bytes that are no UTF-8 come as lone surrogates (surrogateescape)
            args.text.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(args.text[exc.start])
            what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "a surrogate"
            raise InputError(
                f"TEXT is not UTF-8 text ({what} at character {exc.start}); the command line "
                f"reads UTF-8: set the terminal's encoding to it"
            ) from None
    texts = [args.text] if args.text is not None else read_queries(args.file)
    sd = _open(args)
    if not (args.explain or args.json or args.min_score is not None):
        # Values alone: the bulk path (one encoder call, no Attention per query).
        for value in _listed(sd.lookup(texts)):
            print(printed(value))
        return 0
    matched = True
    # In batches (each one encoder call, one search), each printed as it is done: one batch of
    # every query held every query's Attention over every key (100,000 queries: 7.4 GB).
    for start in range(0, len(texts), _ATTEND_BATCH):
        for attention in sd.attend(texts[start : start + _ATTEND_BATCH]):
            matched = report(attention, sd.combination, args) and matched
        sys.stdout.flush()
    return 0 if matched else NO_MATCH


def _listed(values: Any) -> list[Any]:
    """A batch result as one item per query (an array of vectors is one row each)."""
    return list(values) if not isinstance(values, list) else values


def _info_remote(args: argparse.Namespace) -> int:
    sd = _open(args)
    kind = sd.value_kind
    print(f"store        {args.store}, collection {args.collection}")
    print(f"keys         {len(sd)}")
    print(f"values       {getattr(kind, 'value', kind) or '-'}")
    print(f"encoder      {sd.encoder.name} ({sd.encoder.dim} dims)")
    print(f"similarity   {sd.similarity.value}, temperature {sd.temperature:g}")
    print(f"index        {sd.index_description}")
    print(f"spelling     lexical {sd.lexical:g}, {_combination(sd.combination, sd.lexical_known)}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from softdict._manifest import FORMAT_NAME, MANIFEST, config_as_loaded, read_manifest
    from softdict._persistence import recover_store

    if _remote(args.store, args.collection):
        return _info_remote(args)
    folder = Path(args.store)
    if recover_store(folder):  # as a load would: the store is whole in one of its swap folders
        print(f"softdict: finished a save to {folder} that was cut short", file=sys.stderr)
    if not folder.is_dir():
        lite = f"; a Milvus Lite store is named milvus:{folder} --collection NAME"
        raise InputError(f"{folder}: no such store folder" + (lite if folder.is_file() else ""))
    manifest = read_manifest(folder)
    # As the store loads: an older format with the options it answered with.
    body, config = manifest.body, config_as_loaded(manifest.body.config, manifest.version)
    temperature = config.temperature if config.temperature is not None else "default"
    if config.temperature is None and body.dim is not None:  # the measured default in force
        temperature = f"{config.temperature_for(body.dim):g} (default)"
    # What an "auto" index holds now, as its saved state says: exact, or the index it built.
    state = getattr(body, "index", None) or {}
    held = "exact" if state.get("phase") == "exact" else state.get("large")
    print(f"store        {folder}")
    print(f"format       {FORMAT_NAME} version {manifest.version}")
    print(f"keys         {body.count}")
    print(f"values       {body.value_kind or '-'}")
    print(f"encoder      {body.encoder.name} ({body.encoder.dim} dims)")
    print(f"similarity   {config.similarity.value}, temperature {temperature}")
    print(f"index        {config.index}" + (f": {held}" if isinstance(held, str) else ""))
    combination = _combination(config.combination.value, config.lexical_known)
    print(f"spelling     lexical {config.lexical:g}, {combination}")
    total = sum(f.bytes for f in body.files.values()) + (folder / MANIFEST).stat().st_size
    print(f"files        {len(body.files) + 1}, {total:,} bytes")
    # Sizes only (a load also checks every file's SHA-256): a store that cannot load is no "ok".
    damaged = [
        name
        for name, listed in body.files.items()
        if not (folder / name).is_file() or (folder / name).stat().st_size != listed.bytes
    ]
    if damaged:
        raise InputError(
            f"{folder}: {', '.join(damaged)} missing or not of the size the manifest lists; the "
            f"store will not load: restore it from a copy, or build it again"
        )
    return 0


def _holds_a_store(output: str) -> bool:
    """Whether ``build -o output`` would replace a store: a store folder, or one a save cut
    short left beside it (finished here, so that it is one again)."""
    from softdict._manifest import MANIFEST, replacing_refused
    from softdict._persistence import recover_store

    if output.startswith("milvus:"):  # a collection that holds keys is refused by _build
        return False
    recover_store(output)
    # A folder no save may replace is no store to replace: _build says why, --force or not.
    return (Path(output) / MANIFEST).is_file() and replacing_refused(Path(output)) is None


def _combination(name: str, known: float) -> str:
    """The combination of meaning and spelling, as ``info`` shows it."""
    weighs_known = CombinationName(name).weighs_known
    return f"combination {name}" + (f", known words keep {known:g}" if weighs_known else "")


def _finite(text: str) -> float:
    """A number option that must be finite (a NaN min-score would call nothing a match, and
    prints as no JSON; a NaN weight or temperature was refused with a bound's message)."""
    try:
        value = float(text)
    except ValueError:  # argparse would name this function: "invalid _finite value"
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


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
    build.add_argument(
        "-o", "--output", required=True, help="the store folder to write, or milvus:URI"
    )
    build.add_argument(
        "--force", action="store_true", help="replace the store at --output if there is one"
    )
    build.add_argument("--format", choices=["csv", "json", "jsonl"], help="default: by extension")
    build.add_argument(
        "--encoder",
        default=None,
        help="model name or path, or bundled-int8 (default: the bundled model)",
    )
    build.add_argument("--index", default=None, help="default: auto")
    build.add_argument(
        "--combination",
        choices=[name.value for name in CombinationName],
        default=None,
        help="how meaning and spelling make one score "
        f"(default: {SoftDictConfig().combination.value})",
    )
    build.add_argument("--value-kind", choices=["scalar", "vector", "categorical"], default=None)
    build.add_argument(
        "--skip-bad-rows",
        action="store_true",
        help="leave out rows whose number columns hold a cell that is no number (and say so)",
    )
    build.add_argument(
        "--on-duplicate",
        choices=["last", "first", "error"],
        default="last",
        help="a key given twice keeps its last value (default, as a dict), its first, or fails",
    )
    build.add_argument("--collection", default=None, help="the collection of a milvus:... store")
    build.set_defaults(run=_build)

    query = commands.add_parser("query", help="look texts up in a store")
    query.add_argument("store")
    query.add_argument("text", nargs="?", default=None)
    query.add_argument("--file", help="queries, one per line ('-' for standard input)")
    query.add_argument("--explain", action="store_true", help="show keys and weights as bars")
    query.add_argument("--json", action="store_true", help="print a JSON object per query")
    query.add_argument("--top", type=int, default=5, help="how many keys to show (default 5)")
    query.add_argument(
        "--min-score", type=_finite, default=None, help="below it: no match (exit 3)"
    )
    query.add_argument("--temperature", type=_finite, default=None, help="instead of the store's")
    query.add_argument(
        "--lexical",
        type=_finite,
        default=None,
        help="the spelling channel's weight, instead of the store's (0: meaning alone)",
    )
    query.add_argument("--collection", default=None, help="the collection of a milvus:... store")
    query.set_defaults(run=_query)

    info = commands.add_parser("info", help="describe a store")
    info.add_argument("store")
    info.add_argument("--collection", default=None, help="the collection of a milvus:... store")
    info.set_defaults(run=_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 error, 2 usage, 3 no match)."""
    parser = _parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(arguments)
    # argparse gives the optional TEXT nothing when an option stands between it and STORE
    # ("query STORE --explain TEXT"), and then calls TEXT unrecognised: it is TEXT.
    # So is the one argument after "--" that argparse left ("query STORE --json -- -TEXT"),
    # and a TEXT "--" itself, which argparse drops as a second separator ("query STORE -- --").
    if args.run is _query and args.text is None:
        if len(extra) == 1 and extra[0][:1] != "-":
            args.text, extra = extra[0], []
        elif len(extra) == 2 and extra[0] == "--":
            args.text, extra = extra[1], []
        elif not extra and arguments[-2:] == ["--", "--"]:
            args.text = "--"
    if extra:
        # A query that starts with one dash, not a mistyped option ("--jsn"):
        dashed = args.run is _query and any(a[:1] == "-" and a[:2] != "--" for a in extra)
        hint = "; a query that starts with '-' goes after '--': query STORE [options] -- TEXT"
        parser.error(f"unrecognized arguments: {' '.join(extra)}" + (hint if dashed else ""))
    if getattr(args, "top", 1) < 1:
        print("softdict: error: --top must be at least 1", file=sys.stderr)
        return 2
    if args.run is _query and (args.text is None) == (args.file is None):
        message = "give a query TEXT or --file FILE (one query per line), one of the two"
        print(f"softdict: error: {message}", file=sys.stderr)
        return 2
    try:
        if args.run is _build and not args.force and _holds_a_store(args.output):
            print(
                f"softdict: error: {args.output} holds a store; pass --force to replace it, or "
                f"choose another -o",
                file=sys.stderr,
            )
            return 2
        return int(args.run(args))
    except (InputError, SoftDictError, OSError) as exc:  # OSError: a file that vanished, a
        # full disk, a folder without permission. One line: a model loader's message had two.
        print(f"softdict: error: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: a folder store is whole, a Milvus one this build made gone
        print("softdict: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line, never a traceback
        print(
            f"softdict: internal error: {type(exc).__name__}: {exc} (a bug in softdict; please "
            f"report it with the command that caused it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
