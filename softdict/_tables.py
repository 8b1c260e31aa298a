"""Reading a table (CSV, JSON, JSON Lines) into the items of a store, and a file of queries,
losing nothing silently.

``softdict build`` reads its input here, before the encoder loads, so a bad file fails in a
moment with a message that names the line and column. CSV is read by the ``csv`` module with
``newline=""``, as its documentation says: a quoted cell keeps its newlines, and a form feed or a
Unicode line separator inside a cell stays in the cell. Nothing is guessed quietly:

* a value column whose cells are numbers except for some (an empty cell, a typo) is an error
  naming the first such cell; ``skip_bad_rows`` leaves those rows out and says how many;
* a key given twice keeps its last value (as a dict does), its first, or is an error
  (``on_duplicate``), and the count is reported;
* ragged rows, NUL bytes, repeated column names (CSV header, JSON object), cells beyond csv's
  size limit, JSON too deep to read, a JSON row without the value, and a key of spaces only are
  errors with the line; how a cell reads as a value (a number, a code, a vector) is
  ``_table_cells``'.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from softdict._table_cells import Problem, cell_value, json_float, numeric

__all__ = [
    "InputError",
    "Table",
    "TableItems",
    "lines_of",
    "read_items",
    "read_queries",
    "read_table",
]

FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}


class InputError(Exception):
    """A problem with the command's input file or arguments."""


@dataclass(frozen=True)
class Table:
    """Rows of named cells, each with the line (or JSON item) it comes from."""

    path: Path
    columns: list[str]
    rows: list[dict[str, Any]]
    lines: list[int]
    where: str  # "line" (CSV, JSON Lines) or "item" (a JSON list)


@dataclass
class TableItems:
    """The items to insert, and what the reading left out or merged, to report."""

    items: dict[str, object]
    skipped: list[str] = field(default_factory=list)  # one description per row left out
    duplicates: list[str] = field(default_factory=list)  # one description per repeated key
    # "categorical" where the one value column was read as labels and a JSON number sits among
    # them: the store is made so, where a first value that is a number would make it scalar.
    value_kind: str | None = None


def read_table(path: Path, fmt: str | None) -> Table:
    """The rows of ``path`` (format by ``fmt`` or the file's extension)."""
    if not path.exists() or path.is_dir():  # a pipe or a device is read as a file is
        what = "a folder, not a file" if path.is_dir() else "no such file"
        raise InputError(f"{path}: {what}")
    fmt = fmt or FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputError(f"{path}: unknown format; name it .csv, .json or .jsonl, or pass --format")
    text = read_text(path)
    _refuse_nul(
        path,
        text,
        "which no text table should; the file may be binary or damaged: re-export it as UTF-8 text",
    )
    if fmt == "csv":
        table = _read_csv(path, text)
    elif fmt == "json":
        table = _read_json(path, text)
    else:
        table = _read_json_lines(path, text)
    if not table.rows:
        raise InputError(f"{path}: the file has no rows")
    return table


# The byte-order marks a text file may open with, and the codec that reads past each (UTF-32's
# before UTF-16's, whose little-endian mark starts UTF-32's): Windows editors and PowerShell's
# ">" write UTF-16 with a mark. A file without one is read as UTF-8.
_MARKED_CODECS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def read_text(path: str | Path) -> str:
    """The text of the file ``path``, in the encoding its byte-order mark names (the mark
    dropped), else UTF-8; line ends as they are (a quoted CSV cell keeps "\r\n"). InputError
    where it cannot be read or decoded."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return _decoded(data, path)


def _decoded(data: bytes, source: object) -> str:
    """``data`` in the encoding its byte-order mark names, else UTF-8 (``read_text``)."""
    codec = next((name for mark, name in _MARKED_CODECS if data.startswith(mark)), "utf-8")
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{source}: not {codec.removesuffix('-sig').upper()} text ({exc.reason} at byte "
            f"{exc.start}); save it as UTF-8"
        ) from None


def read_queries(source: str) -> list[str]:
    """The queries in the file ``source`` (``-``: standard input), one per line, split at line
    feeds only (``lines_of``); blank lines are skipped and a byte-order mark dropped (a file's
    names its encoding: ``read_text``)."""
    if source == "-":
        # Its bytes where it has them, read as a file's (the locale's codec would take Latin-1
        # bytes as escapes, and a UTF-16 pipe as NULs); a text stream (a test's) as it is.
        raw = getattr(sys.stdin, "buffer", None)
        try:
            text = _decoded(raw.read(), source) if raw is not None else sys.stdin.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{source}: cannot read the queries ({exc})") from None
    else:
        text = read_text(source)
    # A NUL would reach the encoder as part of a query; a UTF-16 file without its byte-order
    # mark, read as UTF-8, is full of them.
    _refuse_nul(
        source,
        text,
        "which no query should; the file may be binary, or UTF-16 text without a byte-order "
        "mark: save it as UTF-8, one query per line",
    )
    texts = [line for line in lines_of(text.removeprefix("\ufeff")) if line.strip()]
    if not texts:
        raise InputError(f"{source}: no queries in it")
    return texts


def _refuse_nul(source: object, text: str, why: str) -> None:
    """InputError naming the line of ``text``'s first NUL, if it holds one."""
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise InputError(f"{source}: line {line} holds a NUL byte, {why}")


def _read_csv(path: Path, text: str) -> Table:
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    try:
        header = next(reader, None)
        if header is None:
            return Table(path, [], [], [], "line")
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise InputError(
                f"{path}: line 1: the column name {repeated[0]!r} appears more than once; name "
                f"each column once"
            )
        first_line = reader.line_num + 1
        for record in reader:
            start, first_line = first_line, reader.line_num + 1
            if not record or (len(record) == 1 < len(header) and not record[0].strip()):
                continue  # a blank line, or one of spaces only (as JSON Lines skips it)
            if len(record) != len(header):
                # A row that ran on over several lines in a quoted cell and ended the file may
                # be a quote left open; else a comma in a cell that should have been quoted.
                unclosed = reader.line_num > start and any("\n" in cell for cell in record)
                hint = (
                    f"a quote opened in it may not be closed (the row ran on to line "
                    f"{reader.line_num})"
                    if unclosed
                    else "a cell may hold an unquoted comma"
                )
                raise InputError(
                    f"{path}: line {start} has {len(record)} cells, the header "
                    f"{len(header)}; {hint}"
                )
            rows.append(dict(zip(header, record)))
            lines.append(start)
    except csv.Error as exc:
        raise InputError(
            f"{path}: line {reader.line_num}: {exc}; csv reads cells of up to "
            f"{csv.field_size_limit():,} characters"
            if "field limit" in str(exc)
            else f"{path}: line {reader.line_num}: {exc}"
        ) from None
    return Table(path, header, rows, lines, "line")


def _deepest_line(text: str, limit: int = 500) -> int:
    """The line where brackets first nest ``limit`` deep, strings aside: where a JSON text too
    deep for Python's parser goes too deep."""
    depth, line, in_string, escaped = 0, 1, False, False
    for char in text:
        if char == "\n":
            line += 1
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth >= limit:
                return line
        elif char in "]}":
            depth -= 1
    return line


class _RepeatedName(ValueError):
    """A JSON object that names a field more than once, whose first value json would drop."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; _RepeatedName where it names a field twice (at any depth)."""
    found = dict(pairs)
    if len(found) < len(pairs):
        names = [name for name, _ in pairs]
        raise _RepeatedName(next(name for name in names if names.count(name) > 1))
    return found


def _parse_json(path: Path, text: str, line: int | None = None) -> Any:
    where = f"line {line}" if line is not None else None
    try:
        return json.loads(text, object_pairs_hook=_object, parse_float=json_float)
    except _RepeatedName as exc:
        raise InputError(
            f"{path}: {where or 'the file'}: a JSON object names {exc.args[0]!r} more than "
            f"once (JSON would keep its last value only); name each field once"
        ) from None
    except json.JSONDecodeError as exc:
        at = where or f"line {exc.lineno}"
        raise InputError(f"{path}: invalid JSON at {at}: {exc.msg}") from None
    except RecursionError:
        at = where or f"line {_deepest_line(text)}"
        raise InputError(
            f"{path}: the JSON at {at} nests too deeply to read; a table's rows are flat objects"
        ) from None


def _as_rows(path: Path, items: list[Any], lines: list[int], where: str) -> Table:
    columns: list[str] = []
    for item, line in zip(items, lines):
        if not isinstance(item, dict):
            raise InputError(f"{path}: {where} {line} is not an object with named columns")
        columns.extend(name for name in item if name not in columns)
    return Table(path, columns, items, lines, where)


def _read_json(path: Path, text: str) -> Table:
    rows = _parse_json(path, text) if text.strip() else []
    if not isinstance(rows, list):
        raise InputError(f"{path}: a JSON file must hold a list of objects")
    return _as_rows(path, rows, list(range(1, len(rows) + 1)), "item")


def lines_of(text: str) -> list[str]:
    r"""``text``'s lines, split at line feeds only (a carriage return before one dropped), with
    no line after a final line feed. ``str.splitlines`` also splits at U+2028, U+0085, form
    feeds and other separators, which a query or a JSON string may hold as it is.

    >>> lines_of("a\u2028b\r\nc\n")
    ['a\u2028b', 'c']
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _read_json_lines(path: Path, text: str) -> Table:
    rows, lines = [], []
    for number, line in enumerate(lines_of(text), start=1):
        if line.strip():
            rows.append(_parse_json(path, line, number))
            lines.append(number)
    return _as_rows(path, rows, lines, "line")


def read_items(
    table: Table,
    key: str,
    columns: list[str],
    *,
    value_kind: str | None = None,
    skip_bad_rows: bool = False,
    on_duplicate: str = "last",
) -> TableItems:
    """The (key, value) items of ``table``: one value column as the value, several as a vector.

    Raises:
        InputError: a column is missing, a key cell is empty, a number column holds a cell that
            is no number (unless ``skip_bad_rows``), or a key repeats with ``on_duplicate="error"``.
    """
    path = table.path
    for column in [key, *columns]:
        if column not in table.columns:
            raise InputError(
                f"{path}: no column {column!r}; the columns are "
                f"{', '.join(map(repr, table.columns))}"
            )
    several, vector = len(columns) > 1, value_kind == "vector" and len(columns) == 1
    holds_numbers = {
        column: numeric([row.get(column) for row in table.rows], value_kind, several)
        for column in columns
    }
    # A JSON number among a column of labels is a label too (not the store's first value).
    labels = value_kind is None and len(columns) == 1 and not holds_numbers[columns[0]]
    labels = labels and any(_is_number(row.get(columns[0])) for row in table.rows)
    result = TableItems({}, value_kind="categorical" if labels else value_kind)
    first_line: dict[str, int] = {}
    length: tuple[int, int] | None = None  # a vector column's length, and the line that set it
    padded = value_kind in ("scalar", "vector")  # "007" is 7 only where numbers were asked for
    for row, line in zip(table.rows, table.lines):
        name = row.get(key)
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"{path}: {table.where} {line} has no text in the key column {key!r}")
        values: list[object] = []
        for column in columns:
            cell, at = row.get(column), f"{table.where} {line}, column {column!r}"
            problem: Problem | None = None
            if column not in row:  # a JSON row without it (null is a label, or no number)
                problem = (f"{at} is missing (other rows have it)", "give every row a value")
            elif cell is None and (holds_numbers[column] or vector):
                problem = (f"{at} is null", "give every row a value")
            else:
                value, wrong = cell_value(
                    cell, number=holds_numbers[column], vector=vector, padded=padded,
                    several=several,
                )  # fmt: skip
                if wrong is not None:
                    problem = (f"{at}: {wrong[0]}", wrong[1])
                elif vector:
                    size = len(value)  # type: ignore[arg-type]  # a list: cell_value checked
                    length = length or (size, line)
                    if size != length[0]:
                        why = f"{at}: a vector of {size} numbers, where {table.where} {length[1]}'s"
                        problem = (f"{why} has {length[0]}", "give every row's vector one length")
            if problem is not None:
                if not skip_bad_rows:
                    raise InputError(
                        f"{path}: {problem[0]}; {problem[1]}, or pass --skip-bad-rows to leave "
                        f"such rows out"
                    )
                result.skipped.append(problem[0])
                break
            values.append(value)
        else:
            value = values[0] if len(columns) == 1 else values
            if name in first_line:
                repeat = f"{name!r} on {table.where}s {first_line[name]} and {line}"
                if on_duplicate == "error":
                    raise InputError(
                        f"{path}: the key {repeat}; keep one, or pass --on-duplicate last|first"
                    )
                result.duplicates.append(repeat)
                if on_duplicate == "first":
                    continue
            else:
                first_line[name] = line
            result.items[name] = value
    return result


def _is_number(cell: object) -> bool:
    """Whether a JSON cell is a number (not a bool, which JSON keeps apart)."""
    return isinstance(cell, (int, float)) and not isinstance(cell, bool)
