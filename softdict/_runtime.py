"""Process settings softdict needs before its numeric libraries load.

A soft lookup of text runs torch (to encode the query) and then FAISS or numpy (to search), one
after the other. OpenMP's default is to keep a library's threads spinning for a while after each
call, so on a small machine the idle spinning threads of one library starve the working threads
of the next. Waiting passively puts them to sleep at once (benchmarks/scale.py measures
``lookup(text)`` with this setting). A value the user has set is kept; the setting reaches only
the OpenMP runtimes that load after softdict is imported (FAISS's always; torch's unless
imported earlier).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS reports one (a
    ``taskset`` or a container's cpuset shows there, where ``os.cpu_count()`` counts every core
    of the machine), else ``os.cpu_count()``; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this OS (macOS, Windows)
        return max(1, os.cpu_count() or 1)
