"""Value kinds: what a store holds and how attention blends it.

``ValueColumn`` (in ``base``) is the protocol; each kind is one file, registered here under the
name ``value_kind=`` accepts. A new kind is one file plus one call to ``register_value_kind``.

============= ============================================ =========================================
value_kind=   what you store                               what ``lookup`` returns
============= ============================================ =========================================
"scalar"      int or float (not bool)                      the weighted sum, a float
"vector"      1-D numbers, one length per store            the weighted sum, a float64 array
"categorical" any other JSON-serialisable value (a label)  the label with the largest summed weight
============= ============================================ =========================================
"""

from __future__ import annotations

from softdict._files import FileReader, StoreFiles
from softdict._types import BatchValue, Label, Value
from softdict.values.base import LossKind, ValueColumn
from softdict.values.categorical import CategoricalColumn
from softdict.values.distribution import Distribution
from softdict.values.registry import (
    column_class,
    infer_column_class,
    kind_names,
    register_value_kind,
)
from softdict.values.scalar import ScalarColumn
from softdict.values.vector import VectorColumn

__all__ = [
    "BatchValue",
    "Distribution",
    "FileReader",
    "Label",
    "LossKind",
    "StoreFiles",
    "Value",
    "ValueColumn",
    "column_class",
    "infer_column_class",
    "kind_names",
    "register_value_kind",
]

for _column in (ScalarColumn, VectorColumn, CategoricalColumn):
    register_value_kind(_column, inferred=True)
