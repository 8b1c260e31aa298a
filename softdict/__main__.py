"""``python -m softdict``: the ``softdict`` command, where the entry point is not on the PATH."""

import sys

from softdict._cli import main

if __name__ == "__main__":
    sys.exit(main())
