"""Python's cyclic garbage collector, paused while a lookup reads a Milvus store.

A full-attention lookup of a large store brings back thousands of hits, and pymilvus makes two
dicts of each: tens of thousands of container objects that live for the lookup and are then
freed by reference counting (none is part of a cycle). Their count alone triggers the cyclic
collector, and objects that outlive two young collections get a full collection of the process's
whole heap every few lookups. Measured on a 10^5-key store (``benchmarks/milvus_store.py``'s
data, a process of 133,000 tracked objects): 7 full collections in 40 lookups, 130 ms each on
average, so that a lookup took 130 ms on average against 105 ms with the collector paused. The
heap is the application's, so in a larger process each such collection costs more.

``collector_paused`` pauses the collector for a lookup and resumes it after, as msgpack and other
parsers of large messages advise for a burst of short-lived objects. The pause is shared by the
threads in it: the first to enter pauses a collector that was running, the last to leave
resumes it, and one that the application had paused stays paused. Garbage made meanwhile is
collected as usual once the collector runs again.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_inside = 0
_resume = False


@contextmanager
def collector_paused() -> Iterator[None]:
    global _inside, _resume
    with _lock:
        if _inside == 0:
            _resume = gc.isenabled()
            gc.disable()
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _resume:
                gc.enable()
