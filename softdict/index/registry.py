"""Which backend an ``index=`` option names: a registry of named backends, and FAISS factory
strings for everything else."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from softdict._arguments import check_plug_in
from softdict._errors import ConfigError, short_repr
from softdict._similarity import Metric
from softdict.index.base import IndexBackend

__all__ = [
    "BackendRefused",
    "BackendSpec",
    "backend_names",
    "backend_spec",
    "register_backend",
]


@dataclass(frozen=True)
class BackendSpec:
    """A registered backend: the ``index=`` name, how to create one for a dimension and metric,
    and what to call it before any key is stored (when its dimension is not known yet)."""

    name: str
    create: Callable[[int, Metric], IndexBackend]
    description: str


class BackendRefused(ConfigError):
    """Raised by a fallback for an option it recognises and refuses: the message is complete,
    not one of the reasons why no fallback took the option."""


_NAMED: dict[str, BackendSpec] = {}
_LOCK = threading.Lock()
# Turns an option that is not a registered name into a spec (FAISS factory strings), or None.
_FALLBACK: list[Callable[[str], BackendSpec | None]] = []


def register_backend(
    name: str, create: Callable[[int, Metric], IndexBackend], *, description: str | None = None
) -> None:
    """Make ``index=name`` create ``create(dim, metric)``; ``description`` is shown before the
    first key (default: the name). Registering a name again replaces it.

    Raises:
        ConfigError: ``name`` is no non-empty str, or ``create`` is not callable.
    """
    check_plug_in(name, "index backend name", create)
    if description is not None and not isinstance(description, str):
        raise ConfigError(
            f"register_backend's description must be a str, got {short_repr(description, 60)}"
        )
    with _LOCK:
        _NAMED[name] = BackendSpec(name, create, description or name)


def register_fallback(resolve: Callable[[str], BackendSpec | None]) -> None:
    """Consulted, in registration order, for options that are not registered names."""
    with _LOCK:
        _FALLBACK.append(resolve)


def backend_names() -> list[str]:
    return sorted(_NAMED)


def backend_spec(option: str) -> BackendSpec:
    """The backend an ``index=`` option names; ConfigError if none does."""
    if option in _NAMED:
        return _NAMED[option]
    reasons = []
    for resolve in _FALLBACK:
        try:
            spec = resolve(option)
        except BackendRefused:
            raise
        except ConfigError as exc:
            reasons.append(str(exc))
            continue
        if spec is not None:
            return spec
    detail = f" ({'; '.join(reasons)})" if reasons else ""
    raise ConfigError(
        f"index={short_repr(option)} is neither one of {backend_names()} nor a FAISS "
        f"index_factory "
        f"string{detail}; see the FAISS wiki page 'The index factory' for the syntax"
    )
