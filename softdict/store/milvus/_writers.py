"""The writers' counter rows of a Milvus store's metadata (``writer:<uuid>``, one per process
that writes): each holds its count of writes, the ids each of its recent writes changed (up to
``_metadata.CHANGES_KEPT`` ids), the write still open, and when it last wrote. A directory that
saw the counters before can fetch just the keys changed since (``changed_since``) instead of
every key; any other text (a writer of softdict before the log wrote the count alone) or a gap
in the log tells only that the store changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

__all__ = [
    "WRITER_PREFIX",
    "Counter",
    "changed_since",
    "counter_of",
    "has_open_write",
    "new_writer",
]

WRITER_PREFIX = "writer:"


@dataclass(frozen=True)
class Counter:
    """A writer row: its count of writes, the ids of its logged writes, the write still open,
    and when it last wrote (None: a row of softdict before the time was kept)."""

    writes: int
    log: dict[int, list[int]]
    open: int | None
    time: float | None = None


def counter_of(text: str | None) -> Counter | None:
    """A writer row's counter; an empty one for a writer not seen yet; None for a row without
    a log (a writer of softdict before the log)."""
    if text is None:
        return Counter(0, {}, None)
    try:
        parsed = json.loads(text)
        log = {int(n): [int(i) for i in ids] for n, ids in parsed["changed"]}
        opened, written = parsed.get("open"), parsed.get("time")
        return Counter(
            int(parsed["writes"]),
            log,
            None if opened is None else int(opened),
            None if written is None else float(written),
        )
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def has_open_write(counters: dict[str, str]) -> bool:
    """Whether a writer's row holds a write that is not closed (in progress, or its writer was
    killed): its keys are fetched again at every lookup."""
    return any(c is not None and c.open is not None for c in map(counter_of, counters.values()))


def changed_since(before: dict[str, str], now: dict[str, str]) -> np.ndarray | None:
    """The ids (increasing, unique) of the keys that writes changed between the writers'
    counters ``before`` and ``now``, and those of writes open in either, where the logs tell;
    None where they do not (a writer's row without a log, writes gone from its log, a
    writer's row gone)."""
    if not set(before) <= set(now):
        return None
    changed: list[int] = []
    for writer, text in now.items():
        then, current = counter_of(before.get(writer)), counter_of(text)
        if then is None or current is None:
            return None
        if current.writes < then.writes:
            return None
        wanted = set(range(then.writes + 1, current.writes + 1))
        wanted |= {write for write in (then.open, current.open) if write is not None}
        if not wanted <= set(current.log):
            return None
        changed.extend(i for write in wanted for i in current.log[write])
    return np.unique(np.asarray(changed, dtype=np.int64))


def new_writer(uuid_hex: str) -> str:
    """The counter row of a new writing process."""
    return WRITER_PREFIX + uuid_hex
