"""An account of the vLLM engines and servers the tools start: with
``VLLM_KIMI_EAGLE_START_LOG=FILE`` set, every start appends one JSON line to FILE (what was
started, by which test where one runs, and for how long). The test suite sets it and prints
the account at the end of every run (tests/conftest.py)."""

from __future__ import annotations

import json
import os

ENV = "VLLM_KIMI_EAGLE_START_LOG"


def record(kind: str, label: str, seconds: float, **extra) -> None:
    """One line for one start: ``kind`` engine or server, ``label`` what it ran."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({
        "kind": kind, "label": label, "seconds": round(seconds, 1),
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""), **extra})
    with open(path, "a") as f:  # one short append per line: whole lines, several writers
        f.write(line + "\n")


def read(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []
