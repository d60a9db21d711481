"""What a start costs the test suite, by phase, and what two engines at once cost each other.

    .venv/bin/python benchmarks/start_cost.py [--rounds 3] [--only engine,server,side-by-side]

On the tiny models (cached by `make demo` or `make test`), A and B in turn, each round:

- ``engine``: the suite's engine (tests/engine_run.py, the base draft, the standard job)
  forked from the preloaded vLLM with its KV cache sized to the tests (192 MiB), against
  the same engine in a fresh interpreter with a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE=1``,
  what the suite gave every engine before);
- ``server``: the shared servers' start (vLLM's OpenAI server with the draft) with its API
  process forked from the preloaded vLLM, against a fresh interpreter;
- ``side-by-side``: two such engines at once, one bound to each core as the suite's two
  workers bind them, with one OpenMP thread each, against vLLM's default for an engine
  whose core runs in the caller's process (a thread per CPU, unbound): each job's
  seconds.

Prints the medians of the seconds to ready and of each phase (tools/engines/start_phases.py)
and the ratios B/A. A figure, not a test (docs/measurements.md, "The test suite's time").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests import helpers  # noqa: E402
from tests.e2e.conftest import SHARED_SERVER_ARGS, SHARED_SERVER_K  # noqa: E402
from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models  # noqa: E402
from vllm_kimi_eagle.tools.engines import preloaded, start_log, start_phases  # noqa: E402
from vllm_kimi_eagle.tools.engines import vllm_server  # noqa: E402

GIB = 2**30


def _last_start(log: str) -> dict:
    return start_log.read(log)[-1]


@contextlib.contextmanager
def environ(**changes):
    """os.environ with ``changes`` (None: unset) for the block."""
    saved = {name: os.environ.get(name) for name in changes}
    for name, value in changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _spec(tiny: str, **extra) -> dict:
    return {"target": os.path.join(tiny, "target"), "draft": os.path.join(tiny, "draft"),
            "dtype": "float32", "prompts": helpers.PROMPTS, "max_tokens": helpers.MAX_TOKENS,
            **extra}


def engine_start(tiny: str, forked: bool) -> dict:
    """One engine run through the suite's harness; its account line and job seconds."""
    spec = _spec(tiny) if forked else _spec(tiny, kv_cache_memory_bytes=GIB)
    with environ(**({} if forked else {preloaded.ENV: None})):
        result = helpers.run_engine(spec)
    assert "error" not in result, result["error"]
    return {**_last_start(os.environ[start_log.ENV]), "job_s": result["generate_seconds"]}


def server_start(tiny: str, forked: bool, out: str) -> dict:
    spec = {"method": "eagle3", "model": os.path.join(tiny, "draft"),
            "num_speculative_tokens": SHARED_SERVER_K}
    with environ(**({} if forked else {preloaded.ENV: None})):
        with vllm_server.running_server(os.path.join(tiny, "target"),
                                        os.path.join(out, "server.log"), spec,
                                        SHARED_SERVER_ARGS, env=helpers.BASE_ENV):
            pass
    return _last_start(os.environ[start_log.ENV])


def side_by_side(tiny: str, one_thread: bool) -> dict:
    """Two engines at once in fresh interpreters (an OpenMP runtime is set up when torch
    is imported), one bound to each core: the slower one's job seconds."""
    results: dict[int, dict] = {}

    def run(core: int) -> None:
        results[core] = helpers.run_engine(
            _spec(tiny), env={"VLLM_CPU_OMP_THREADS_BIND": str(core)})

    with environ(**{preloaded.ENV: None, "OMP_NUM_THREADS": "1" if one_thread else None}):
        threads = [threading.Thread(target=run, args=(core,)) for core in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for result in results.values():
        assert "error" not in result, result["error"]
    return {"job_s": max(r["generate_seconds"] for r in results.values())}


def in_turn(rounds: int, a, b) -> tuple[list[dict], list[dict]]:
    """``a()`` and ``b()`` in turn, ``rounds`` times: their results."""
    results: tuple[list[dict], list[dict]] = ([], [])
    for _ in range(rounds):
        results[0].append(a())
        results[1].append(b())
    return results


def median(rows: list[dict], key: str) -> float:
    """The median of a phase (start_phases.PHASES) or of another figure of the rows."""
    if key in start_phases.PHASES:
        return statistics.median(row.get("phases", {}).get(key, 0.0) for row in rows)
    return statistics.median(row[key] for row in rows)


def report(name: str, a_name: str, b_name: str, a: list[dict], b: list[dict],
           keys: list[str]) -> None:
    print(f"\n{name}: median of {len(a)} rounds, A = {a_name}, B = {b_name}")
    print(f"  {'':24} {'A':>8} {'B':>8} {'B/A':>6}")
    for key in keys:
        ma, mb = median(a, key), median(b, key)
        ratio = f"{mb / ma:6.2f}" if ma else "     -"
        print(f"  {key:24} {ma:8.2f} {mb:8.2f} {ratio}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="engine,server,side-by-side")
    args = parser.parse_args()
    tiny = ensure_tiny_models()
    out = tempfile.mkdtemp(prefix="start-cost-")
    os.environ[start_log.ENV] = os.path.join(out, "starts.jsonl")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0"
    os.environ["OMP_NUM_THREADS"] = "1"
    helpers.preloaded_process()
    only = args.only.split(",")
    phases = ["startup_s", *start_phases.PHASES]
    if "engine" in only:
        report("engine start (base draft, standard job)",
               "fresh interpreter, 1 GiB KV cache", "forked, 192 MiB KV cache",
               *in_turn(args.rounds, lambda: engine_start(tiny, forked=False),
                        lambda: engine_start(tiny, forked=True)),
               phases + ["job_s", "seconds"])
    if "server" in only:
        report("server start (OpenAI server with the draft)", "fresh API process",
               "API process forked",
               *in_turn(args.rounds, lambda: server_start(tiny, False, out),
                        lambda: server_start(tiny, True, out)), phases)
    if "side-by-side" in only:
        report("two engines at once, one per core (the slower one's job)",
               "a thread per CPU each (vLLM's default in-process)", "one OpenMP thread each",
               *in_turn(args.rounds, lambda: side_by_side(tiny, one_thread=False),
                        lambda: side_by_side(tiny, one_thread=True)), ["job_s"])
    print(json.dumps({"out": out}))
    os._exit(0)  # the preloaded process's atexit would wait on nothing useful


if __name__ == "__main__":
    sys.exit(main())
