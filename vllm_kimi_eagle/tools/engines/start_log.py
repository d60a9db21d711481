"""An account of the vLLM engines and servers the tools start: with
``VLLM_KIMI_EAGLE_START_LOG=FILE`` set, every start appends one JSON line to FILE (what was
started, by which test where one runs, and for how long). The test suite sets it and prints
the account at the end of every run (tests/conftest.py)."""

from __future__ import annotations

import json
import os

ENV = "VLLM_KIMI_EAGLE_START_LOG"
# Variables that say nothing about what was started: this account's, the test suite's
# shared results folder, and the core an engine is bound to.
IGNORED = (ENV, "VLLM_KIMI_EAGLE_TEST_RUNS", "VLLM_CPU_OMP_THREADS_BIND")


def describe(command: list[str], env: dict | None) -> tuple[str, str]:
    """(a short label, an identity) of a start: the command with a JSON argument's prompts
    left out, and a hash of the whole command and the VLLM_* variables it ran with."""
    import hashlib

    words = []
    for word in command:
        try:
            spec = json.loads(word)
        except ValueError:
            spec = None
        if isinstance(spec, dict):
            word = json.dumps({k: v for k, v in spec.items() if k != "prompts"})
        words.append(os.path.basename(word) if os.sep in word and " " not in word else word)
    settings = sorted((k, v) for k, v in (env or os.environ).items() if k.startswith("VLLM_")
                      and k not in IGNORED)
    identity = hashlib.sha256(json.dumps([command, settings]).encode()).hexdigest()[:12]
    changed = [f"{k}={v}" for k, v in settings if k.startswith("VLLM_KIMI_EAGLE") or
               k == "VLLM_PLUGINS"]
    return " ".join(" ".join(changed + words).split())[:300], identity


def record(kind: str, command: list[str], env: dict | None, seconds: float, **extra) -> None:
    """One line for one start: ``kind`` engine or server, ``command`` what it ran."""
    path = os.environ.get(ENV)
    if not path:
        return
    label, identity = describe(command, env)
    line = json.dumps({
        "kind": kind, "label": label, "identity": identity, "seconds": round(seconds, 1),
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
