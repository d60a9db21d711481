"""An account of the vLLM engines and servers the tools start: with
``VLLM_KIMI_EAGLE_START_LOG=FILE`` set, every start appends one JSON line to FILE (what was
started, by which test where one runs, and for how long). The test suite sets it and prints
the account at the end of every run (tests/conftest.py)."""

from __future__ import annotations

import json
import os

ENV = "VLLM_KIMI_EAGLE_START_LOG"
# Variables that say nothing about what was started: this account's, the preloaded vLLM
# a start was forked from, the core an engine is bound to, and the test suite's own.
IGNORED = (ENV, "VLLM_KIMI_EAGLE_PRELOADED", "VLLM_CPU_OMP_THREADS_BIND")
IGNORED_PREFIX = "VLLM_KIMI_EAGLE_TEST_"
# Set (to 1) by a test suite in the environment of the starts it shares among its tests
# (the tests' engines and shared servers, as against those a tool under test starts for
# itself): one of those started twice by a worker is a start the suite could have saved.
SHARED = "VLLM_KIMI_EAGLE_TEST_SHARED_START"


# What a JSON argument asks of an engine once started, not how it is started.
ASKED = ("prompts", "jobs")


def describe(command: list[str], env: dict | None) -> tuple[str, str]:
    """(a short label, an identity) of a start: the command with what a JSON argument asks
    of the engine (ASKED) left out, and a hash of that command (less a server's port,
    which every start chooses anew) and the VLLM_* variables it ran with."""
    import hashlib

    started = []
    for i, word in enumerate(command):
        try:
            spec = json.loads(word)
        except ValueError:
            spec = None
        if isinstance(spec, dict):
            word = json.dumps({k: v for k, v in spec.items() if k not in ASKED})
        if word != "--port" and (i == 0 or command[i - 1] != "--port"):
            started.append(word)
    words = [os.path.basename(w) if os.sep in w and " " not in w else w for w in started]
    settings = sorted((k, v) for k, v in (env or os.environ).items() if k.startswith("VLLM_")
                      and k not in IGNORED and not k.startswith(IGNORED_PREFIX))
    identity = hashlib.sha256(json.dumps([started, settings]).encode()).hexdigest()[:12]
    changed = [f"{k}={v}" for k, v in settings if k.startswith("VLLM_KIMI_EAGLE") or
               k == "VLLM_PLUGINS"]
    return " ".join(" ".join(changed + words).split())[:300], identity


def record(kind: str, command: list[str], env: dict | None, seconds: float, **extra) -> None:
    """One line for one start: ``kind`` engine or server, ``command`` what it ran."""
    path = os.environ.get(ENV)
    if not path:
        return
    label, identity = describe(command, env)
    if (env or os.environ).get(SHARED) == "1":
        extra["shared"] = True
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


def median(values: list[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def startup(start: dict) -> float:
    """Seconds from launch to ready (the whole run where the line does not say)."""
    return start.get("startup_s", start["seconds"])


def account(starts: list[dict], longest: int = 10) -> list[str]:
    """The account of a run's starts: how many, their seconds (in all, and to ready: the
    median and each phase summed), the longest, and each configuration a worker started
    more than once (``restarted``)."""
    from collections import Counter

    from vllm_kimi_eagle.tools.engines.start_phases import PHASES

    kinds = Counter(s["kind"] for s in starts)
    forked = sum(1 for s in starts if s.get("forked"))
    lines = [f"engine and server starts: {len(starts)} ({kinds['engine']} engines, "
             f"{kinds['server']} servers; {forked} forked from a preloaded vLLM), "
             f"{sum(s['seconds'] for s in starts):.0f} s in all; ready after "
             f"{sum(startup(s) for s in starts):.0f} s in all, median "
             f"{median([startup(s) for s in starts]):.1f} s (engines "
             f"{median([startup(s) for s in starts if s['kind'] == 'engine']):.1f} s, servers "
             f"{median([startup(s) for s in starts if s['kind'] == 'server']):.1f} s)"]
    if not starts:
        return lines
    summed = {name: sum(s.get("phases", {}).get(name, 0.0) for s in starts) for name in PHASES}
    unphased = sum(startup(s) for s in starts if not s.get("phases"))
    lines.append("  to ready, by phase (s, summed): " + ", ".join(
        f"{name} {seconds:.0f}" for name, seconds in summed.items())
        + (f", not read {unphased:.0f}" if unphased else ""))
    for s in sorted(starts, key=lambda s: -s["seconds"])[:longest]:
        lines.append(f"  {s['seconds']:7.1f} s  (ready {startup(s):5.1f} s)  {s['kind']:6}  "
                     f"{s['test'] or '-'}  {s['label'][:120]}")
    for start, count, tests in restarted(starts):
        lines.append(f"  started {count} times on worker {start['worker'] or '-'}: "
                     f"{start['kind']} {start['label'][:200]} (by {', '.join(tests)})")
    return lines


def restarted(starts: list[dict]) -> list[tuple[dict, int, list[str]]]:
    """Each configuration one worker started more than once where that start could have
    been saved: twice by one test, or one the suite shares (SHARED). Its first start, how
    many times, and the tests that started it. (Two tests that each run a tool which starts
    the same server prove each tool's own start.)"""
    from collections import defaultdict

    by_config: dict[tuple, list[dict]] = defaultdict(list)
    for s in starts:
        if not s.get("lost_port"):  # started again at once on another port
            by_config[(s.get("worker", ""), s["identity"])].append(s)
    found = []
    for again in by_config.values():
        tests = [s["test"] or "-" for s in again]
        if len(again) > 1 and (len(set(tests)) < len(tests)
                               or any(s.get("shared") for s in again)):
            found.append((again[0], len(again), sorted(set(tests))))
    return found
