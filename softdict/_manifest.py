"""The manifest of a saved store: its schema, and reading it without trusting it.

``manifest.json`` names the store's format and version and holds a body: the options, counts,
the encoder's identity, and each file's size and SHA-256. The body is checksummed, and every
field is validated against the schema below (pydantic) before any is used: a manifest that
lists a path outside the folder, a field of the wrong type, or JSON nested too deeply is a
``StoreFormatError`` naming the file, never another exception. ``check_files`` reads the files a
manifest lists, each checked against its size and SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from softdict._config import CombinationName, SoftDictConfig
from softdict._errors import StoreFormatError
from softdict._files import canonical_json
from softdict.encoders.base import EncoderIdentity

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "FileEntry",
    "FormatOneBody",
    "FormatTwoBody",
    "Manifest",
    "blank_kind_as_unfixed",
    "check_files",
    "check_part_names",
    "config_as_loaded",
    "read_manifest",
    "refuse_newer_combination",
    "replacing_refused",
    "sha256",
]

FORMAT_NAME = "softdict-store"
FORMAT_VERSION = 4
MANIFEST = "manifest.json"
# The files a store folder holds beside its parts' (index, values, spelling).
OWN_FILES = (MANIFEST, "keys.json", "ids.npy", "query_projection.npy")


def config_as_loaded(config: SoftDictConfig, version: int) -> SoftDictConfig:
    """The options a store saved in format ``version`` with ``config`` loads with, so that it
    answers as it did: before format 4 (the learned combination) the hand-set rule, and before
    format 3 (the spelling channel) meaning alone too."""
    if version >= 4:
        return config
    older: dict[str, object] = {"combination": CombinationName.RULE_1}
    if version < 3:
        older["lexical"] = 0.0
    return config.replace(**older)


# A manifest lists files and a few options: anything larger is not one, and is not read.
MAX_MANIFEST_BYTES = 64 * 2**20


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_part_names(target: Path, names: Iterable[str]) -> None:
    """StoreFormatError, before anything is written, where a part of a store (an index or a
    value column, perhaps a plug-in's) names a file that is the store's own or outside its
    folder: a plug-in's "ids.npy" replaced the store's, and "../x.npy" was written beside the
    folder, each saved as if whole and refused by load (a hostile-input probe)."""
    for name in names:
        if not is_bare_name(name) or name in OWN_FILES:
            what = "one of the store's own files" if name in OWN_FILES else "no plain file name"
            raise StoreFormatError(
                f"cannot save to {target}: a part of the store (its index or its value column) "
                f"names the file {name!r}, which is {what}; a plug-in's dump() must name plain "
                f"files of its own (nothing was written)"
            )


def is_bare_name(name: str) -> bool:
    """A file name of the store folder itself: no folder part, no way out of it."""
    return (
        bool(name)
        and name not in (".", "..")
        and not any(sep in name for sep in ("/", "\\", "\x00"))
    )


class _Schema(BaseModel):
    # Strict: a manifest softdict wrote has exact JSON types; "16" for 16 means tampering.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class FileEntry(_Schema):
    """One file of the store: its size and checksum."""

    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class EncoderEntry(_Schema):
    """The encoder's identity (see ``softdict.encoders.EncoderIdentity``)."""

    name: str
    dim: int = Field(ge=1)
    loadable_by_name: bool
    probe_text: str
    fingerprint: list[float]

    @model_validator(mode="after")
    def _fingerprint_of_dim(self) -> EncoderEntry:
        # The fingerprint is the encoder's embedding of the probe text: dim numbers. A manifest
        # that says otherwise was edited, and loaded as if nothing were wrong.
        if len(self.fingerprint) != self.dim:
            raise ValueError(
                f"says dim {self.dim}, but its fingerprint holds {len(self.fingerprint)} numbers"
            )
        return self

    @field_validator("fingerprint")
    @classmethod
    def _finite(cls, value: list[float]) -> list[float]:
        if not all(math.isfinite(x) for x in value):
            raise ValueError("must hold finite numbers")
        return value

    @classmethod
    def of(cls, identity: EncoderIdentity) -> EncoderEntry:
        """The entry that records ``identity``."""
        return cls(
            name=identity.name,
            dim=identity.dim,
            loadable_by_name=identity.loadable_by_name,
            probe_text=identity.probe_text,
            fingerprint=list(identity.fingerprint),
        )

    def identity(self) -> EncoderIdentity:
        """The identity this entry records."""
        return EncoderIdentity(
            self.name, self.dim, self.loadable_by_name, self.probe_text, tuple(self.fingerprint)
        )


class _Body(_Schema):
    """What both formats' bodies hold."""

    config: SoftDictConfig
    count: int = Field(ge=0)
    dim: int | None = Field(default=None, ge=1)
    value_kind: str | None
    encoder: EncoderEntry
    files: dict[str, FileEntry]

    @field_validator("files")
    @classmethod
    def _bare_names(cls, files: dict[str, FileEntry]) -> dict[str, FileEntry]:
        outside = [name for name in files if not is_bare_name(name)]
        if outside:
            raise ValueError(f"lists {outside[0]!r}, which is not a file of the store folder")
        return files


class FormatOneBody(_Body):
    """Format 1 (softdict 0.1.0): everything by row, deleted rows included."""

    rows: int = Field(ge=0)
    index_file: str | None


class FormatTwoBody(_Body):
    """Formats 2 to 4: keys with stable ids; the index backend's state in ``index``. (Format 3
    adds the spelling channel: its options in ``config``, its postings among the files; format 4
    the ``combination`` option in ``config``.)"""

    next_id: int = Field(ge=0, lt=2**63)  # ids are int64
    index: dict[str, Any] | None
    replaces_store: bool


@dataclass(frozen=True)
class Manifest:
    version: int
    body: Union[FormatOneBody, FormatTwoBody]  # noqa: UP007 - a runtime union for 3.10


def _parse_json(path: Path, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreFormatError(f"{path} is not valid JSON ({exc}); the file is corrupted") from None
    except RecursionError:
        raise StoreFormatError(f"{path} is JSON nested too deeply to be a store's") from None


def refuse_newer_combination(saved: object, where: object) -> None:
    """StoreFormatError where the ``config`` of a saved manifest (its JSON object, ``saved``)
    names a combination this softdict does not know: a newer softdict saved the store at
    ``where``, which is to say so, not that the store is damaged."""
    config = saved.get("config") if isinstance(saved, dict) else None
    name = config.get("combination") if isinstance(config, dict) else None
    known = [member.value for member in CombinationName]
    if isinstance(name, str) and name not in known:
        raise StoreFormatError(
            f"{where} uses the combination of meaning and spelling {name!r}, which this "
            f"softdict does not know ({', '.join(known)}): a newer softdict saved it; upgrade "
            f"softdict to load it"
        )


def blank_kind_as_unfixed(saved: object) -> None:
    """Read a blank ``value_kind`` in the ``config`` of a saved manifest (its JSON object) as
    None, what it meant where the store was made: softdict took ``value_kind=""`` for "no kind
    fixed" until it refused it, and such a store saved but did not load."""
    config = saved.get("config") if isinstance(saved, dict) else None
    kind = config.get("value_kind") if isinstance(config, dict) else None
    if isinstance(kind, str) and not kind.strip():
        config["value_kind"] = None  # type: ignore[index]


# The options each format's saves record first: a manifest whose format_version (outside the
# checksummed body, so one altered byte) disagrees with them loaded with other options, without
# a word (format 4 read as 3: the hand-set rule; as 2: meaning alone).
_OPTION_SINCE = {"lexical": 3, "combination": 4}


def _check_version_agrees(body: object, version: int, path: Path) -> None:
    """StoreFormatError where the options the (checksummed) body records are those of another
    format than ``version`` says."""
    config = body.get("config") if isinstance(body, dict) else None
    if not isinstance(config, dict):
        return  # the schema refuses it, saying so
    for option, since in _OPTION_SINCE.items():
        recorded = option in config
        if recorded != (version >= since):
            formats = f"{since} or later" if recorded else f"before {since}"
            found = "records" if recorded else "lacks"
            raise StoreFormatError(
                f"{path} says store format {version}, but its options are those of format "
                f"{formats} (it {found} {option!r}): the manifest was altered; restore it from "
                f"a copy"
            )


def read_manifest(folder: Path) -> Manifest:
    """The manifest of the store at ``folder``: format, version, checksum and schema checked."""
    path = folder / MANIFEST
    if path.is_symlink() or not path.is_file():
        raise StoreFormatError(
            f"{path} is missing: {folder} is not a softdict store (or its save never finished)"
        )
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise StoreFormatError(f"{path} is larger than any store's manifest; it is not one")
    manifest = _parse_json(path, path.read_bytes())
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise StoreFormatError(f"{path} is not a softdict manifest (no 'format': {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if type(version) is not int or version < 1:
        raise StoreFormatError(f"{path} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise StoreFormatError(
            f"{folder} was saved in store format {version}, newer than this softdict reads "
            f"(up to {FORMAT_VERSION}); upgrade softdict to load it"
        )
    body = manifest.get("body")
    try:
        intact = isinstance(body, dict) and sha256(canonical_json(body)) == manifest.get(
            "body_sha256"
        )
    except (TypeError, ValueError, RecursionError):
        intact = False
    if not intact:
        raise StoreFormatError(f"{path} fails its checksum: the manifest is corrupted")
    refuse_newer_combination(body, folder)
    _check_version_agrees(body, version, path)
    blank_kind_as_unfixed(body)
    schema = FormatOneBody if version == 1 else FormatTwoBody
    try:
        return Manifest(version, schema.model_validate(body))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise StoreFormatError(f"{path} lacks or garbles a field ({problems})") from None


def check_files(folder: Path, files: dict[str, FileEntry]) -> dict[str, bytes]:
    """Each listed file's bytes, checked against the manifest: a plain file of the folder (the
    schema allows bare names only; links are not followed), its size compared before it is
    read (a huge file in a store's place is refused unread), then its SHA-256."""
    contents = {}
    for name, expected in files.items():
        path = folder / name
        if path.is_symlink():
            raise StoreFormatError(f"{path} is a link; a store's files are plain files")
        if not path.is_file():
            raise StoreFormatError(f"{path} is missing; the store is incomplete")
        size = path.stat().st_size
        if size != expected.bytes:
            raise StoreFormatError(
                f"{path} has {size} bytes, the manifest says {expected.bytes}: "
                f"the file is truncated or was replaced"
            )
        data = path.read_bytes()
        if len(data) != expected.bytes or sha256(data) != expected.sha256:
            raise StoreFormatError(f"{path} fails its SHA-256 checksum: the file is corrupted")
        contents[name] = data
    return contents


def replacing_refused(target: Path) -> str | None:
    """Why a save may not replace ``target`` (it replaces the whole folder), or None where it
    may: nothing is there, an empty folder, or a softdict store whose manifest reads and lists
    every entry of its folder. A file; a folder of other data; one whose manifest.json is not
    softdict's, is damaged or is a link (which of its entries a store wrote cannot be told: a
    folder of a web app's manifest.json and pages was replaced whole, and a store's folder with
    a damaged manifest lost the notes beside it); a store's folder holding an entry its manifest
    does not list (a file a user put there, a store saved inside it): each is refused, saying
    why. The command line's build asks before it reads and encodes a table."""
    if not target.exists():
        return None
    if not target.is_dir():
        return "it exists and is not a softdict store (a file)"
    entries = [entry.name for entry in target.iterdir()]
    if not entries:
        return None
    if MANIFEST not in entries:
        return "it exists and is not a softdict store"
    try:
        written = {MANIFEST, *read_manifest(target).body.files}
    except StoreFormatError as exc:
        return (
            f"its {MANIFEST} is not a readable softdict manifest ({exc}), so which of its "
            f"{len(entries)} entries a store wrote cannot be told"
        )
    # A lock file of a store saved inside (".NAME.lock") holds no data: it goes with the folder.
    names = [name for name in entries if name not in written]
    foreign = sorted(n for n in names if not (n.startswith(".") and n.endswith(".lock")))
    if foreign:
        count = f"{len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} in all"
        return f"it holds {foreign[0]!r} ({count}), which is no part of the store saved there"
    return None
