"""Categorical values: any JSON-serialisable value (a label). The blend is the label with the
largest summed weight, and the per-label sums are its ``Distribution``.

Labels are kept as JSON, so ``sd[key]`` returns a fresh copy that the caller may mutate, and a
tuple comes back as a list, exactly as it will after save and load; a numpy number comes back as
the Python number it holds (``canonical_json``). A dict whose keys are not all
strings is refused: JSON would turn ``{1: "a"}`` into ``{"1": "a"}``.

Each label has a code in a table, and each blend sums weight per code. The table holds only
labels some slot holds: a code no slot holds any more is free for the next new label, and
compaction (``keep``) and ``dump`` number the labels afresh, in order of first appearance. So
a store whose values are overwritten with ever-new labels keeps a table no longer than its
slots, and the blend's cost follows the labels held, not every label ever stored.

**Ties.** Labels of equal summed weight (exactly equal floats, e.g. keys of equal embeddings)
go by the labels alone (``tie_order``): numbers by value, then strings in code-point order, then
any other label by its JSON text. Never by codes, which follow a store's history of writes and
deletes: two stores holding the same items answer alike, whatever each went through, and
wherever the values come from (a Milvus store builds its columns per lookup).
"""

from __future__ import annotations

import hashlib
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

__all__ = ["CategoricalColumn", "tie_order"]


def tie_order(text: str) -> tuple[int, object, str]:
    """Where the label of JSON ``text`` goes among labels of equal weight (smallest first):
    numbers by value, then strings in code-point order, then other labels (true, false, null, a
    list, a dict) by their JSON text; the text last, which tells 1 from 1.0."""
    label = json.loads(text)
    if isinstance(label, (int, float)) and not isinstance(label, bool):
        return (0, label, text)
    if isinstance(label, str):
        return (1, label, text)
    return (2, text, text)


def _label_id(text: str) -> int:
    """A 64-bit id of the label of JSON ``text``, the same in every column and process (two
    labels share one about once in 10^19 pairs)."""
    return int.from_bytes(
        hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True
    )


# A label's integers must fit in 64 bits: most JSON readers, Milvus's among them, hold no more.
_INT64 = (-(2**63), 2**63 - 1)


def _label_fault(value: object) -> str | None:
    """What in a label JSON would not give back as it is, or None: a dict key that is not a str
    (JSON makes it one) or an integer past 64 bits (a Milvus store cannot hold it)."""
    pending = [value]
    while pending:  # a loop, not recursion: json.dumps took the label, however deep
        item = pending.pop()
        if isinstance(item, np.generic):  # a numpy number is the Python one JSON writes
            item = item.item()
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    back = json.dumps(str(key) if key is not None else None)
                    return (
                        f"holds a dict with the key {key!r} ({type(key).__name__}); JSON keeps "
                        f"only string keys, so it would come back as {back}: use string keys "
                        "in dict labels"
                    )
                pending.append(inner)
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, int) and not _INT64[0] <= item <= _INT64[1]:
            return (
                f"holds an integer of {item.bit_length()} bits, outside the signed 64-bit "
                "range (-2**63 to 2**63 - 1) that JSON readers (Milvus's among them) hold: "
                "store it as a string"
            )
    return None


class CategoricalColumn(ValueColumn[list[str]]):
    """Labels, stored as codes into a table of their canonical JSON (see the module docstring)."""

    kind = "categorical"
    loss = LossKind.LABEL_LIKELIHOOD

    def __init__(self) -> None:
        self._codes = GrowableRows((), np.int64)
        self._label_json: list[str] = []  # "" at a free code
        self._code_of: dict[str, int] = {}
        self._holders = np.zeros(0, np.int64)  # slots holding each code
        self._free: list[int] = []
        self._ranks: np.ndarray | None = None  # each code's place in the tie order, when asked

    @classmethod
    def accepts(cls, value: object) -> bool:
        try:
            canonical_json(value)
        except (TypeError, ValueError, RecursionError):  # RecursionError: a label nested too deep
            return False
        return True

    def __len__(self) -> int:
        return len(self._codes)

    @property
    def table_size(self) -> int:
        """Entries in the label table, free ones included: what each blend sums weight over.
        At most the number of slots the column held at one time."""
        return len(self._label_json)

    def stage(self, values: Sequence[object], keys: Sequence[str]) -> list[str]:
        staged = []
        for key, value in zip(keys, values):
            try:
                text = canonical_json(value)
            except (TypeError, ValueError, RecursionError) as exc:
                if isinstance(value, np.ndarray):  # a vector, or a number: another kind
                    raise self.kind_error(key, value) from None
                raise ValueKindError(
                    f"value for key {key!r} is {describe_value(value)}, which is not a number, a "
                    f"vector or a JSON-serialisable label ({exc}); convert it to one of those"
                ) from None
            # Only a container or a number of 19 characters or more can hold a fault: the walk
            # is skipped for every other label (an int of up to 18 characters fits in 64 bits).
            long_number = (text[0] == "-" or text[0].isdigit()) and len(text) > 18
            if text[0] in "[{" or long_number:
                fault = _label_fault(value)
                if fault is not None:
                    raise ValueKindError(f"the label of key {key!r} {fault}")
            check_unicode(text, f"the label of key {key!r}")  # any string inside the label
            staged.append(text)
        return staged

    def _codes_for(self, staged: list[str]) -> np.ndarray:
        """The codes of ``staged`` labels, new ones taking free codes first; each slot given one
        must be counted (``_hold``)."""
        codes = np.empty(len(staged), np.int64)
        for i, text in enumerate(staged):
            code = self._code_of.get(text)
            if code is None:
                code = self._free.pop() if self._free else len(self._label_json)
                if code == len(self._label_json):
                    self._label_json.append(text)
                else:
                    self._label_json[code] = text
                self._code_of[text] = code
                self._ranks = None
            codes[i] = code
        if len(self._holders) < len(self._label_json):
            # Doubled, not grown to fit: one key at a time with a new label each would copy the
            # whole array on every write (10^5 such writes: quadratic). Codes past the table
            # count 0, as free ones do.
            grown = np.zeros(max(len(self._label_json), 2 * len(self._holders)), np.int64)
            grown[: len(self._holders)] = self._holders
            self._holders = grown
        return codes

    def _count(self, codes: np.ndarray, sign: int) -> None:
        np.add.at(self._holders, codes, sign)  # O(len(codes)): a write of one key is cheap

    def _release(self, codes: np.ndarray) -> None:
        """Free those of ``codes`` no slot holds any more (their text too: the table's memory
        should follow the labels held)."""
        for code in set(codes[self._holders[codes] == 0].tolist()):
            del self._code_of[self._label_json[code]]
            self._label_json[code] = ""
            self._free.append(code)
            self._ranks = None

    def append(self, staged: list[str]) -> None:
        codes = self._codes_for(staged)
        self._count(codes, 1)
        self._codes.append(codes)

    def assign(self, slots: np.ndarray, staged: list[str]) -> None:
        # The old labels first: a code they free is taken by a new label at once, so the table
        # stays within the slots held.
        old = self._codes.view[slots].copy()
        self._count(old, -1)
        self._release(old)
        codes = self._codes_for(staged)
        self._count(codes, 1)
        self._codes.view[slots] = codes

    def _label(self, code: int) -> Label:
        label: Label = json.loads(self._label_json[code])
        return label

    def get(self, slot: int) -> Value:
        return self._label(int(self._codes.view[slot]))

    def _renumbered(self, slots: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The codes of ``slots`` numbered afresh, in order of first appearance there, and the
        table of those labels: a function of the labels alone, not of the codes they had."""
        used, first, inverse = np.unique(
            self._codes.view[slots], return_index=True, return_inverse=True
        )
        by_appearance = np.argsort(first, kind="stable")
        renumber = np.empty(len(used), np.int64)
        renumber[by_appearance] = np.arange(len(used))
        labels = [self._label_json[int(code)] for code in used[by_appearance]]
        return renumber[inverse].reshape(-1), labels

    def keep(self, slots: np.ndarray) -> None:
        # Compaction reads every kept code anyway: the table shrinks to the labels kept here.
        codes, labels = self._renumbered(slots)
        self._codes.keep(slots)
        self._codes.view[:] = codes
        self._label_json = labels
        self._code_of = {text: code for code, text in enumerate(labels)}
        self._holders = np.bincount(codes, minlength=len(labels)).astype(np.int64)
        self._free = []
        self._ranks = None

    def _tie_ranks(self) -> np.ndarray:
        """Each code's place in ``tie_order`` (free codes last), computed once per table."""
        if self._ranks is None:
            held = np.flatnonzero(self._holders)
            order = sorted(held.tolist(), key=lambda code: tie_order(self._label_json[code]))
            ranks = np.full(len(self._label_json), len(self._label_json), np.int64)
            ranks[order] = np.arange(len(order))
            self._ranks = ranks
        return self._ranks

    def _label_mass(self, weights: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Summed weight per label code, (m, n_labels), in one bincount for the whole batch."""
        codes = np.broadcast_to(self._codes.view[slots], weights.shape)
        n_labels = len(self._label_json)
        offsets = n_labels * np.arange(weights.shape[0])[:, None]
        mass = np.bincount((codes + offsets).ravel(), weights.ravel(), weights.shape[0] * n_labels)
        return mass.reshape(weights.shape[0], n_labels)

    def blend(self, weights: np.ndarray, slots: np.ndarray) -> BatchValue:
        mass = self._label_mass(weights, slots)
        best = mass.argmax(axis=1)
        top = mass[np.arange(len(mass)), best]
        # Ties are rare (exactly equal sums), so only their rows look at the tie order, among
        # the labels the row's keys hold (a free code, or one only padding points at, never wins).
        for i in np.flatnonzero(np.count_nonzero(mass == top[:, None], axis=1) > 1).tolist():
            held = np.unique(self._codes.view[slots if slots.ndim == 1 else slots[i]])
            tied = held[mass[i, held] == top[i]]
            if len(tied):
                best[i] = tied[np.argmin(self._tie_ranks()[tied])]
        return [self._label(int(code)) for code in best]

    def explain(
        self, weights: np.ndarray, slots: np.ndarray, present: Callable[[], np.ndarray]
    ) -> list[Distribution | None]:
        # Every stored label is listed, those no attended key holds with probability 0, equal
        # probabilities in the tie order (so the first is the blend's answer).
        # present() first: a remote store appends the stored values to this column there.
        present_slots = present()
        stored = np.unique(self._codes.view[present_slots])
        ranks = self._tie_ranks()[stored]
        explained: list[Distribution | None] = []
        for mass in self._label_mass(weights, slots):
            order = stored[np.lexsort((ranks, -mass[stored]))]
            explained.append(Distribution([(self._label(int(c)), float(mass[c])) for c in order]))
        return explained

    def calibration_values(self, slots: np.ndarray) -> np.ndarray:
        # Ids of the labels' text, not codes: a Milvus store reads the values of each request
        # into a column of its own, with codes of its own, and calibration compares a key's
        # label with its neighbours' labels, read in other requests.
        used, inverse = np.unique(self._codes.view[slots], return_inverse=True)
        ids = np.fromiter(map(_label_id, (self._label_json[c] for c in used.tolist())), np.int64)
        return ids[inverse].reshape(np.shape(slots))

    def dump(self, slots: np.ndarray) -> StoreFiles:
        # Only the labels these slots hold, in order of first appearance: the files depend on
        # the values alone (the format since the first: labels.json is any table of labels).
        codes, labels = self._renumbered(slots)
        return {"label_codes.npy": codes.astype(np.int64), "labels.json": labels}

    @classmethod
    def restore(cls, files: FileReader, n: int) -> CategoricalColumn:
        codes = files.npy("label_codes.npy", np.int64, (n,))
        labels = files.json_list("labels.json")
        if not all(isinstance(text, str) for text in labels) or (
            n and (codes.min() < 0 or codes.max() >= len(labels))
        ):
            raise files.error("label_codes.npy", "does not match labels.json")
        # Each text as a write makes it today (canonical_json): an earlier version wrote a dict
        # with int keys in numeric order, and a label read back and written again must share
        # its code, not take a second one.
        canonical = []
        for text in labels:
            try:
                canonical.append(canonical_json(json.loads(text)))
            except (json.JSONDecodeError, RecursionError, ValueError):
                raise files.error("labels.json", "holds a label that is not JSON") from None
        column = cls()
        # Through the table: a label listed twice gets one code, one no key holds none.
        column.append([canonical[code] for code in codes.tolist()])
        return column
