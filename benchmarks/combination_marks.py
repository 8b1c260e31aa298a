"""The keys an exact mark of ``softdict.spelling.evidence`` can point at, for
``combination_study.py``'s candidates: found by lookups rather than by marking every key."""

from __future__ import annotations

import bisect

import numpy as np

from softdict.spelling import spelling_form
from softdict.spelling.evidence import compact, evidence_marks


class Marked:
    """The keys an exact mark can point at, found by lookups rather than by marking every key:
    by form (start, same), by word (word start), by initials, by first letter (abbreviation)."""

    def __init__(self, keys: list[str]) -> None:
        self.forms = [spelling_form(key) for key in keys]
        self.by_form = sorted((compact(form), i) for i, form in enumerate(self.forms))
        self.by_word = sorted(
            (word, i) for i, form in enumerate(self.forms) for word in set(form.split())
        )
        self.by_first: dict[str, list[int]] = {}
        for i, form in enumerate(self.forms):
            if form:
                self.by_first.setdefault(form[0], []).append(i)

    @staticmethod
    def _starting(pairs: list[tuple[str, int]], prefix: str) -> set[int]:
        found = set()
        at = bisect.bisect_left(pairs, (prefix, -1))
        while at < len(pairs) and pairs[at][0].startswith(prefix):
            found.add(pairs[at][1])
            at += 1
        return found

    def of(self, text: str) -> set[int]:
        form = spelling_form(text)
        short = compact(form)
        if len(short) < 2:
            return set()
        found = self._starting(self.by_form, short) | self._starting(self.by_word, form)
        first = self.by_first.get(form[0], [])
        marks = evidence_marks(form, [self.forms[i] for i in first])
        return found | {first[j] for j in np.flatnonzero(marks.any(axis=1))}
