"""How a table's cells read as values (``softdict build``), nothing guessed quietly: numbers as
tables write them, zero-padded codes, numbers too small for a float64, vectors as JSON lists.

Each reading gives the value, or what is wrong with the cell and what to do (``Problem``), which
``_tables.read_items`` turns into an error naming the line, or a row left out.
"""

from __future__ import annotations

import json
import math
import re

from softdict._errors import short_repr
from softdict.values.base import MAX_EXACT_INT

__all__ = ["Problem", "Underflow", "cell_value", "json_float", "numeric"]

# What is wrong with a cell, and what to do about it.
Problem = tuple[str, str]

# A number as a table writes one: ASCII digits, a sign, a point, an exponent, or a spelled
# infinity or NaN (a number, but refused as a value: ``_unfit``). Python's int() and float()
# also read "1_000", Arabic-Indic and fullwidth digits, which in a table are more likely codes:
# not guessed.
_NUMBER = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)\s*",
    re.ASCII | re.IGNORECASE,
)

# Text that reads as a number but for a leading zero ("007", "0042"): a code, whose zeros a
# number would lose. Taken as a number only where the value kind says numbers.
_ZERO_PADDED = re.compile(r"\s*[+-]?0\d", re.ASCII)

_TOO_SMALL = "is too small for a 64-bit float (it would read as 0)"


class Underflow(float):
    """A JSON number too small for a float64, which json reads as 0 without a word
    (``json_float``): 0, with its ``text``, so that a cell holding one is refused where a value
    is read from it, and one in a column no value comes from costs nothing."""

    text = ""


def json_float(text: str) -> float:
    """A JSON number as json reads it, marked (``Underflow``) where it would read as 0."""
    number = float(text)
    if not _vanishes(text, number):
        return number
    marked = Underflow(number)
    marked.text = text
    return marked


def _vanishes(text: object, number: float) -> bool:
    """Whether ``text``, with a digit other than 0, read as the number 0 ("1e-400")."""
    mantissa = text.lower().split("e")[0] if isinstance(text, str) else ""
    return number == 0 and any(digit in mantissa for digit in "123456789")


def _number(cell: object, padded: bool = False) -> int | float | None:
    """A cell as a number: numbers as they are, text that reads as one (``_NUMBER``; with a
    leading zero only where ``padded``), else None."""
    if isinstance(cell, bool):
        return None
    if isinstance(cell, (int, float)):
        return cell
    if not isinstance(cell, str) or not _NUMBER.fullmatch(cell):
        return None
    if not padded and _ZERO_PADDED.match(cell):
        return None
    try:
        return int(cell)
    except ValueError:
        return float(cell)


def numeric(cells: list[object], value_kind: str | None, several: bool) -> bool:
    """Whether a value column holds numbers: when asked for (``scalar``, ``vector``, several
    columns), never for ``categorical``, and otherwise when most of its cells are numbers (of
    those given: a JSON row's null or missing cell is a problem of its own)."""
    if value_kind == "categorical" or (value_kind == "vector" and not several):
        return False  # labels, or one JSON list per cell
    if value_kind in ("scalar", "vector") or several:
        return True
    given = [cell for cell in cells if cell is not None]
    return sum(_number(cell) is not None for cell in given) * 2 > len(given)


def cell_value(
    cell: object, *, number: bool, vector: bool, padded: bool, several: bool
) -> tuple[object, Problem | None]:
    """A present cell's value: a number (``number``: a column of numbers; ``padded``: "007" is
    7), a vector (``vector``: one column of JSON lists), else the cell as a label."""
    if vector:
        return _vector(cell)
    if not number:
        if isinstance(cell, Underflow):
            return None, (f"{cell.text} {_TOO_SMALL}", "fix the cell")
        if isinstance(cell, float) and not math.isfinite(cell):  # a JSON number: 1e400, NaN
            return None, (f"{cell!r} is no finite number", "fix the cell")
        return cell, None
    value = _number(cell, padded)
    if value is None:
        advice = "the column holds numbers: fix the cell"
        if _number(cell, padded=True) is not None:  # "007"
            advice = (
                "a leading zero marks a code: pass --value-kind vector to read it as a number"
                if several
                else "a leading zero marks a code: pass --value-kind categorical to keep the "
                "column as text, or --value-kind scalar to read it as numbers"
            )
        return None, (f"{cell!r} is not a number", advice)
    if isinstance(cell, Underflow) or _vanishes(cell, value):
        return None, (f"{getattr(cell, 'text', cell)!r} {_TOO_SMALL}", "fix the cell")
    return value, _unfit(cell, value, several)


def _unfit(cell: object, value: float, several: bool) -> Problem | None:
    """What makes a number no value, found here so that the error names the cell's line and
    --skip-bad-rows leaves its row out (the store refuses it too, but for a key, not a line):
    NaN, infinity, a number past float64's range, an integer past 2**53 (float64 would round
    it)."""
    if isinstance(value, float) and not math.isfinite(value):
        if isinstance(cell, str) and any(ch.isdigit() for ch in cell):
            return f"{cell.strip()} is beyond a 64-bit float's range (1.8e308)", "fix the cell"
        return f"{cell!r} is no finite number", "values must be finite: fix the cell"
    if isinstance(value, int) and abs(value) > MAX_EXACT_INT:
        keep = "" if several else ", or --value-kind categorical to keep it as text"
        return (
            f"{short_repr(value, 30)} is an integer beyond 2**53, which a 64-bit float rounds",
            f"round it in the table{keep}",
        )
    return None


def _vector(cell: object) -> tuple[object, Problem | None]:
    """A JSON list of finite numbers as a vector: a JSON file's list, or a CSV cell's text of
    one (a CSV cell is text; "[1, 2]" was refused as "no vector", with the advice to give it)."""
    advice = "repeat --value for each column of a vector, or give a JSON list of numbers per cell"
    if isinstance(cell, str) and cell.lstrip().startswith("["):
        try:
            cell = json.loads(cell, parse_float=json_float)
        except (ValueError, RecursionError):
            return None, (f"{cell!r:.60} is no JSON list", advice)
    if not isinstance(cell, list) or not cell:
        return None, (f"{cell!r:.60} is no vector", advice)
    for item in cell:
        if isinstance(item, Underflow):
            return None, (f"its item {item.text} {_TOO_SMALL}", "fix the cell")
        # An int first: math.isfinite of one past float64's range (400 digits) raised an
        # OverflowError, which the command line reported as an internal error.
        if isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_EXACT_INT:
            return None, (  # as a number cell (``_unfit``)
                f"its item {short_repr(item, 30)} is an integer beyond 2**53, which a 64-bit "
                "float rounds",
                "round it in the table",
            )
        if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item):
            return None, (f"its item {short_repr(item, 30)} is no finite number", "fix the cell")
    return cell, None
