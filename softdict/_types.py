"""Type names shared by the public API: what a store holds, what a lookup returns, masks."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Final, TypeAlias, Union

import numpy as np
import numpy.typing as npt

__all__ = ["NO_DEFAULT", "BatchValue", "Label", "Mask", "NoDefault", "Value"]

# A categorical value: any JSON value. (Scalars and vectors are numbers and float arrays.)
Label: TypeAlias = Union[  # noqa: UP007 - a recursive alias must be spelt with Union
    str, int, float, bool, list["Label"], dict[str, "Label"], None
]

# What ``sd[key]`` and a single ``lookup`` return: a number, a float64 vector, or a label.
Value: TypeAlias = Union[Label, npt.NDArray[np.float64]]  # noqa: UP007

# What a batch ``lookup`` returns: one array (scalar and vector stores) or a list of labels.
BatchValue: TypeAlias = Union[npt.NDArray[np.float64], list[Label]]  # noqa: UP007

# The keys a soft lookup may attend to: an iterable of keys, a predicate over keys, or None.
Mask: TypeAlias = Union[Iterable[str], Callable[[str], bool], None]  # noqa: UP007


class NoDefault(enum.Enum):
    """The type of ``NO_DEFAULT``: "no default was given", which differs from ``default=None``."""

    NO_DEFAULT = "NO_DEFAULT"

    def __repr__(self) -> str:  # shown by help(SoftDict)
        return "<no default>"


NO_DEFAULT: Final = NoDefault.NO_DEFAULT
