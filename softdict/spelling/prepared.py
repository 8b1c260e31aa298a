"""New keys as a spelling index takes them (``PreparedKeys``): their forms, token-sorted forms,
3-grams and accented forms, spelled before a store commits them (the slow part of adding keys),
and the accented forms as the index's object columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from softdict.spelling.scores import object_column
from softdict.spelling.text import Spelled, sorted_like, token_sorted

if TYPE_CHECKING:
    import scipy.sparse as sp  # only large stores build postings (ngrams.py imports it there)

__all__ = ["PreparedKeys", "accented_columns"]


@dataclass(frozen=True)
class PreparedKeys:
    """New keys' forms, token-sorted forms, 3-grams (None where no postings exist yet) and
    accented forms (``text.accented_form``: the form itself, the same object, where the key
    bore no accent)."""

    forms: list[str]
    sorted_forms: list[str]
    grams: sp.csr_matrix | None
    accented: list[str]

    @classmethod
    def of_forms(
        cls, forms: list[str], grams: sp.csr_matrix | None = None, accented: list[str] | None = None
    ) -> PreparedKeys:
        """Keys whose forms are already spelled (by ``spelling_form``), and their accented
        forms (None: the forms, as for keys without accents)."""
        return cls(forms, [token_sorted(form) for form in forms], grams, accented or forms)

    @classmethod
    def of_spelled(cls, spelled: list[Spelled]) -> PreparedKeys:
        """Keys whose forms and accented forms are already spelled (``text.Spelled`` pairs)."""
        return cls.of_forms([form for form, _ in spelled], None, [kept for _, kept in spelled])


def accented_columns(keys: PreparedKeys) -> tuple[np.ndarray, np.ndarray]:
    """``keys``' accented forms and these with their words in their forms' sorted order
    (``text.sorted_like``), as object columns: the forms and sorted forms themselves (the same
    objects, so no memory) where a key bore no accent."""
    accented_sorted = [
        sorted_form if accented is form else sorted_like(form, accented)
        for accented, form, sorted_form in zip(keys.accented, keys.forms, keys.sorted_forms)
    ]
    return object_column(keys.accented), object_column(accented_sorted)
