"""A griffe extension for the API reference: three reStructuredText habits of softdict's
docstrings, read as Markdown.

- a simple table (``=====  =====`` rules) becomes a Markdown table;
- a paragraph ending in ``::`` ends in ``:`` (the indented block after it is already code);
- ``<name>`` outside backticks is escaped, so that it shows instead of vanishing as an HTML tag.

The docstrings stay as they are (they also serve ``help()``); this only changes how the site
renders them. It is loaded by mkdocs.yml (mkdocstrings' ``extensions`` option) and runs offline.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_RULE = re.compile(r"^=+( +=+)+\s*$")
_ANGLE = re.compile(r"<([A-Za-z_][\w.-]*)>")


def _cells(line: str, starts: list[int]) -> list[str]:
    """A row cut where the rule's columns start (the last column runs to the line's end)."""
    bounds = [*starts[1:], len(line)]
    return [line[a:b].strip().replace("|", "\\|") for a, b in zip(starts, bounds)]


def _table(lines: list[str]) -> list[str]:
    """A simple table (rule, header, rule, rows, rule) as Markdown rows."""
    starts = [m.start() for m in re.finditer(r"=+", lines[0])]
    body = [line for line in lines if not _RULE.match(line)]
    header, rows = _cells(body[0], starts), [_cells(line, starts) for line in body[1:]]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


def _escape_angles(line: str) -> str:
    # Only outside code spans: split on backticks, escape the even (prose) parts.
    parts = re.split(r"(`+[^`]*`+)", line)
    return "".join(p if i % 2 else _ANGLE.sub(r"&lt;\1&gt;", p) for i, p in enumerate(parts))


def to_markdown(text: str) -> str:
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if _RULE.match(lines[i]):
            rules = [i]
            j = i + 1
            while j < len(lines) and len(rules) < 3:
                if _RULE.match(lines[j]):
                    rules.append(j)
                j += 1
            if len(rules) == 3:
                out += _table(lines[i : rules[2] + 1])
                i = rules[2] + 1
                continue
        line = lines[i]
        if line.endswith("::") and not line.strip().startswith(("..", ">>>")):
            line = line[:-1]
        out.append(_escape_angles(line))
        i += 1
    return "\n".join(out)


def _walk(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = to_markdown(obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            _walk(member)


class RstDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _walk(pkg)
