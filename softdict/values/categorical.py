"""Categorical values: any JSON-serialisable value (a label). The blend is the label with the
largest summed weight, and the per-label sums are its ``Distribution``.

Labels are kept as JSON, so ``sd[key]`` returns a fresh copy that the caller may mutate, and a
tuple comes back as a list, exactly as it will after save and load.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import numpy as np

from softdict._arguments import check_unicode
from softdict._errors import ValueKindError
from softdict._files import FileReader, StoreFiles
from softdict._rows import GrowableRows
from softdict._types import BatchValue, Label, Value
from softdict.values.base import LossKind, ValueColumn, describe_value
from softdict.values.distribution import Distribution, canonical_json

__all__ = ["CategoricalColumn"]


class CategoricalColumn(ValueColumn[list[str]]):
    """Labels, stored as codes into a table of their canonical JSON."""

    kind = "categorical"
    loss = LossKind.LABEL_LIKELIHOOD

    def __init__(self, label_json: Sequence[str] = ()) -> None:
        self._codes = GrowableRows((), np.int64)
        self._label_json: list[str] = list(label_json)
        self._code_of = {text: code for code, text in enumerate(self._label_json)}

    @classmethod
    def accepts(cls, value: object) -> bool:
        try:
            canonical_json(value)
        except (TypeError, ValueError):
            return False
        return True

    def __len__(self) -> int:
        return len(self._codes)

    def stage(self, values: Sequence[object], keys: Sequence[str]) -> list[str]:
        staged = []
        for key, value in zip(keys, values):
            try:
                text = canonical_json(value)
            except (TypeError, ValueError, RecursionError) as exc:
                raise ValueKindError(
                    f"value for key {key!r} is {describe_value(value)}, which is not a number, a "
                    f"vector or a JSON-serialisable label ({exc}); convert it to one of those"
                ) from None
            check_unicode(text, f"the label of key {key!r}")  # any string inside the label
            staged.append(text)
        return staged

    def _codes_for(self, staged: list[str]) -> np.ndarray:
        for text in staged:
            if text not in self._code_of:
                self._code_of[text] = len(self._label_json)
                self._label_json.append(text)
        return np.fromiter((self._code_of[text] for text in staged), np.int64, len(staged))

    def append(self, staged: list[str]) -> None:
        self._codes.append(self._codes_for(staged))

    def assign(self, slots: np.ndarray, staged: list[str]) -> None:
        self._codes.view[slots] = self._codes_for(staged)

    def _label(self, code: int) -> Label:
        label: Label = json.loads(self._label_json[code])
        return label

    def get(self, slot: int) -> Value:
        return self._label(int(self._codes.view[slot]))

    def keep(self, slots: np.ndarray) -> None:
        self._codes.keep(slots)

    def _label_mass(self, weights: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Summed weight per label code, (m, n_labels), in one bincount for the whole batch."""
        codes = np.broadcast_to(self._codes.view[slots], weights.shape)
        n_labels = len(self._label_json)
        offsets = n_labels * np.arange(weights.shape[0])[:, None]
        mass = np.bincount((codes + offsets).ravel(), weights.ravel(), weights.shape[0] * n_labels)
        return mass.reshape(weights.shape[0], n_labels)

    def blend(self, weights: np.ndarray, slots: np.ndarray) -> BatchValue:
        # Ties go to the label first inserted into the store: argmax picks the lowest code.
        mass = self._label_mass(weights, slots)
        return [self._label(int(code)) for code in mass.argmax(axis=1)]

    def explain(
        self, weights: np.ndarray, slots: np.ndarray, present: Callable[[], np.ndarray]
    ) -> list[Distribution | None]:
        # Every stored label is listed, those no attended key holds with probability 0.
        # present() first: a remote store appends the stored values to this column there.
        present_slots = present()
        stored = np.unique(self._codes.view[present_slots])
        explained: list[Distribution | None] = []
        for mass in self._label_mass(weights, slots):
            order = stored[np.argsort(-mass[stored], kind="stable")]
            explained.append(Distribution([(self._label(int(c)), float(mass[c])) for c in order]))
        return explained

    def calibration_values(self, slots: np.ndarray) -> np.ndarray:
        return self._codes.view[slots]

    def dump(self, slots: np.ndarray) -> StoreFiles:
        # Only the labels these slots hold, recoded in their order of first insertion, so ties
        # still go to the label inserted first.
        used, codes = np.unique(self._codes.view[slots], return_inverse=True)
        return {
            "label_codes.npy": codes.astype(np.int64).reshape(-1),
            "labels.json": [self._label_json[int(code)] for code in used],
        }

    @classmethod
    def restore(cls, files: FileReader, n: int) -> CategoricalColumn:
        codes = files.npy("label_codes.npy", np.int64, (n,))
        labels = files.json_list("labels.json")
        if not all(isinstance(text, str) for text in labels) or (
            n and (codes.min() < 0 or codes.max() >= len(labels))
        ):
            raise files.error("label_codes.npy", "does not match labels.json")
        for text in labels:
            try:
                json.loads(text)
            except (json.JSONDecodeError, RecursionError):
                raise files.error("labels.json", "holds a label that is not JSON") from None
        column = cls(labels)
        column._codes.append(codes)
        return column
