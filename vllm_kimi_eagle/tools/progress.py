"""Progress lines of the tools: on stderr, flushed, so that stdout stays the result."""

from __future__ import annotations

import sys


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
