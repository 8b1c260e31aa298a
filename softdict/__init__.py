"""softdict: a dictionary whose lookups go by meaning.

Exact access (``sd[key]``) is a plain dict; ``sd.lookup(query)`` embeds the query and returns
attention over the store, softmax(sim(q, K) / T) · V.
"""

# First: it sets the OpenMP wait policy before FAISS (imported below) loads its runtime.
import softdict._runtime  # noqa: F401
from softdict._config import ValueKind
from softdict._errors import (
    CalibrationWarning,
    ConfigError,
    EmptyStoreError,
    EncoderError,
    InvalidValueError,
    KeyTypeError,
    NoMatchError,
    SoftDictError,
    StoreBusyError,
    StoreFormatError,
    StoreUnavailableError,
    UnknownOptionError,
    ValueKindError,
    ValueShapeError,
)
from softdict._learning import FitReport
from softdict._mapping import SoftDict
from softdict._results import Attention
from softdict._similarity import Similarity
from softdict.encoders.base import Encoder
from softdict.values.distribution import Distribution

__all__ = [
    "Attention",
    "CalibrationWarning",
    "ConfigError",
    "Distribution",
    "EmptyStoreError",
    "Encoder",
    "EncoderError",
    "FitReport",
    "InvalidValueError",
    "KeyTypeError",
    "NoMatchError",
    "Similarity",
    "SoftDict",
    "SoftDictError",
    "StoreBusyError",
    "StoreFormatError",
    "StoreUnavailableError",
    "UnknownOptionError",
    "ValueKind",
    "ValueKindError",
    "ValueShapeError",
]

__version__ = "0.1.0"
