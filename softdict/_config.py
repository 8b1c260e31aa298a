"""Options of a SoftDict, validated once at construction.

The default temperature was chosen by measurement on real text with the bundled encoder
(``benchmarks/choose_temperature.py``; the README shows its table). It is stated for cosine
similarity; for the other similarities it is rescaled so that, on unit-norm embeddings such as the
bundled model's, every similarity gives the same attention weights by default.
"""

from __future__ import annotations

import math
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from softdict._errors import ConfigError

__all__ = ["DEFAULT_COSINE_TEMPERATURE", "Similarity", "SoftDictConfig", "ValueKind"]

# Measured by benchmarks/choose_temperature.py: the temperature that maximises held-out
# log-likelihood of the right category on real words and phrases with all-MiniLM-L6-v2.
DEFAULT_COSINE_TEMPERATURE = 0.05


class Similarity(str, Enum):
    """How a query is scored against a key."""

    COSINE = "cosine"
    DOT = "dot"
    SCALED_DOT = "scaled_dot"  # q·k / sqrt(d), the form of "Attention Is All You Need"
    L2 = "l2"  # negative squared Euclidean distance

    def default_temperature(self, dim: int) -> float:
        """Temperature that matches the cosine default on unit-norm embeddings of ``dim`` dims."""
        if self is Similarity.SCALED_DOT:
            return DEFAULT_COSINE_TEMPERATURE / math.sqrt(dim)
        if self is Similarity.L2:
            # For unit vectors -|q-k|^2 = 2·cos(q, k) - 2: twice the spread of cosine scores.
            return 2.0 * DEFAULT_COSINE_TEMPERATURE
        return DEFAULT_COSINE_TEMPERATURE


class ValueKind(str, Enum):
    """The kind of value a store holds; fixed by the first insert unless given."""

    SCALAR = "scalar"
    VECTOR = "vector"
    CATEGORICAL = "categorical"


class SoftDictConfig(BaseModel):
    """Validated, immutable options of one SoftDict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    similarity: Similarity = Similarity.COSINE
    temperature: float | None = None
    top_k: int | None = Field(default=None, gt=0)
    max_k: int = Field(default=1024, gt=0)
    tail_tolerance: float = Field(default=0.01, gt=0.0, lt=1.0)
    index: str = "auto"
    value_kind: ValueKind | None = None
    query_cache_size: int = Field(default=1024, ge=0)
    batch_size: int = Field(default=64, gt=0)
    progress: bool | None = None

    @field_validator("temperature")
    @classmethod
    def _temperature_positive_finite(cls, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError("must be a finite number > 0")
        return value

    @classmethod
    def build(cls, **options: object) -> SoftDictConfig:
        """Validate ``options``, raising ``ConfigError`` with one line per bad option."""
        try:
            return cls.model_validate(options)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}={err.get('input')!r}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigError(f"invalid SoftDict option: {problems}") from None

    def temperature_for(self, dim: int) -> float:
        """The temperature in force: the one given, or the measured default for this similarity."""
        if self.temperature is not None:
            return self.temperature
        return self.similarity.default_temperature(dim)
