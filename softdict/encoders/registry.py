"""Which encoder an ``encoder=`` argument means.

Resolution order: the ``encoder`` argument; for ``encoder=None`` the ``SOFTDICT_MODEL``
environment variable, then the bundled model. A name or path goes to a registered name first
(the bundled model's hub name loads the bundled package), then to the name fallbacks
(a model2vec folder, then sentence-transformers, from disk only). An object goes to the first
registered wrapper that recognises it (a SentenceTransformer, a model2vec StaticModel), else it
is used as it is if it has ``.encode``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from softdict._arguments import check_plug_in, is_unicode
from softdict._errors import ConfigError, EncoderError
from softdict.encoders.adapter import TextEncoder
from softdict.encoders.base import Encoder

__all__ = [
    "are_variants",
    "register_encoder_name",
    "register_encoder_wrapper",
    "register_name_fallback",
    "resolve_encoder",
]

_NAMED: dict[str, Callable[[], Encoder]] = {}
_VARIANT_OF: dict[str, str] = {}  # a registered name -> the model it is a variant of
_NAME_FALLBACKS: list[Callable[[str], Encoder]] = []
_WRAPPERS: list[tuple[Callable[[object], bool], Callable[[object], Encoder]]] = []
_LOCK = threading.Lock()
_DEFAULT: list[str] = []  # the name encoder=None loads, set by the package
_ENV_VAR: list[str] = []  # the environment variable that overrides it


def register_encoder_name(
    name: str,
    load: Callable[[], Encoder],
    *,
    default: bool = False,
    variant_of: str | None = None,
) -> None:
    """Make ``encoder=name`` load ``load()``; with ``default``, it is also what
    ``encoder=None`` loads when the environment variable is not set. ``variant_of`` names the
    model this is another runtime variant of (e.g. an int8 quantisation): a store built with one
    refuses the other unless asked (``SoftDict.load(..., accept_variant=True)``).

    Raises:
        ConfigError: ``name`` is no non-empty str of valid Unicode (a store records it), or
            ``load`` is not callable.
    """
    check_plug_in(name, "encoder's name")
    if variant_of is not None:
        check_plug_in(variant_of, "encoder's variant_of")
    if not callable(load):
        raise ConfigError(
            f"register_encoder_name({name!r}, load): load must be a function that returns the "
            f"encoder, got {type(load).__name__}"
        )
    with _LOCK:
        _NAMED[name] = load
        if default:
            _DEFAULT[:] = [name]
        if variant_of is not None:
            _VARIANT_OF[name] = variant_of


def are_variants(first: str, second: str) -> bool:
    """Whether two different encoder names are registered variants of one model."""
    with _LOCK:
        model = _VARIANT_OF.get(first, first)
        return (
            first != second
            and model == _VARIANT_OF.get(second, second)
            and (first in _VARIANT_OF or second in _VARIANT_OF)
        )


def register_name_fallback(load: Callable[[str], Encoder], *, env_var: str | None = None) -> None:
    """Try ``load(name)`` for names that are not registered (e.g. a model folder). ``env_var``
    names the variable whose value ``encoder=None`` resolves first."""
    with _LOCK:
        _NAME_FALLBACKS.append(load)
        if env_var is not None:
            _ENV_VAR[:] = [env_var]


def register_encoder_wrapper(
    matches: Callable[[object], bool], wrap: Callable[[object], Encoder]
) -> None:
    """Objects for which ``matches(obj)`` holds are used as ``wrap(obj)``."""
    with _LOCK:
        _WRAPPERS.append((matches, wrap))


def resolve_encoder(encoder: object, *, query_cache_size: int = 1024) -> TextEncoder:
    """Turn the ``encoder=`` argument into a ``TextEncoder`` (see the module docstring)."""
    if isinstance(encoder, TextEncoder):
        return encoder
    if encoder is None:
        from_env = os.environ.get(_ENV_VAR[0]) if _ENV_VAR else None
        return _by_name(from_env or _DEFAULT[0], query_cache_size)
    if isinstance(encoder, (str, os.PathLike)):
        return _by_name(os.fspath(encoder), query_cache_size)
    wrapped = _wrapped(encoder)
    if wrapped is not None:
        return TextEncoder(wrapped, _object_name(encoder), query_cache_size)
    if callable(getattr(encoder, "encode", None)):
        return TextEncoder(encoder, _object_name(encoder), query_cache_size)  # type: ignore[arg-type]
    raise EncoderError(
        f"encoder must be None, a model name or path, a SentenceTransformer, or an object with "
        f".encode(list[str]) returning an (n, d) array; got {type(encoder).__name__}"
    )


def _wrapped(model: object) -> Encoder | None:
    """``model`` as the first wrapper that recognises it wraps it, or None."""
    for matches, wrap in _WRAPPERS:
        if matches(model):
            return wrap(model)
    return None


def _object_name(encoder: object) -> str:
    """An encoder object's ``name``, as a store records it: its type's name where it has none,
    or one that cannot be read or written (its lookup raises, or it is no valid Unicode)."""
    try:
        name = str(getattr(encoder, "name", None) or "")
    except Exception:  # a property that raises, a str() that raises
        name = ""
    return name if name and is_unicode(name) else type(encoder).__name__


def _by_name(name: str, query_cache_size: int) -> TextEncoder:
    load = _NAMED.get(name)
    if load is not None:
        try:
            loaded = load()
        except EncoderError:  # the bundled loaders' own, which say what to install
            raise
        except Exception as exc:
            raise EncoderError(
                f"the encoder registered as {name!r} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        # A loader may return a model a wrapper knows (a StaticModel, a SentenceTransformer),
        # as an object passed as encoder= would be.
        loaded = _wrapped(loaded) or loaded
    else:
        errors: list[EncoderError] = []
        for fallback in _NAME_FALLBACKS:
            try:
                loaded = fallback(name)
                break
            except EncoderError as exc:
                errors.append(exc)
        else:
            # The last way of reading a name (a sentence-transformers model) says most.
            raise errors[-1] if errors else EncoderError(f"no encoder is registered as {name!r}")
    return TextEncoder(loaded, name, query_cache_size, loadable_by_name=True)
