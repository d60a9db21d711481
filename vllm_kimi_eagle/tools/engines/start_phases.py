"""Where a vLLM start spends its seconds, read from its log while it is written.

``Stamped`` reads a start's log every ``POLL_S`` in a thread of its own and stamps each
new line with the seconds since launch; ``phases`` splits the time from launch to ready
where each phase's first line appears (``STARTS``): the process (interpreter or fork,
imports, the plugins), the configs, the engine core's own process (a server's is spawned
and imports vLLM again), the worker (a server's worker process is spawned too), loading
the models, compiling (compiled mode), the KV cache, and what remains until the engine
answers (a server's API start, an offline engine's tokenizer). A phase whose first line
the log lacks is counted in the one before, so the phases always add up to the start.
"""

from __future__ import annotations

import re
import threading
import time

POLL_S = 0.05
# vLLM's log lines: "(EngineCore pid=12) INFO 11-28 12:33:40 [core.py:133] message".
LOG_LINE = re.compile(r"^(?:\((?P<process>[\w-]+) pid=\d+\) )?"
                      r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[")
FIRST_LINE, CONFIG_DONE = "(the first line)", "(the configs' last line)"
ENGINE_START = "Initializing a V1 LLM engine"
# (phase, the line it starts at), in the order vLLM (0.28-0.33) logs them; the first
# phase, "process", starts at the launch. CONFIG_DONE is the last line of the first
# process before another one logs (a server's engine core) or before ENGINE_START.
STARTS = (
    ("config", FIRST_LINE),
    ("engine process", CONFIG_DONE),
    ("worker", ENGINE_START),
    ("load", "Starting to load model"),
    ("compile", "Warming up model for the compilation"),
    ("kv cache", "GiB for KV cache"),
    ("until ready", "init engine (profile, create kv cache, warmup model) took"),
)
PHASES = ("process",) + tuple(name for name, _ in STARTS)
# What a child prints once its engine has started (engine_process.announce_ready); a
# session's child prints its first result line then (engine_process.RESULT_PREFIX).
READY_LINE = "VLLM_KIMI_EAGLE_ENGINE_READY"
READY_PREFIXES = (READY_LINE, "VLLM_KIMI_EAGLE_RESULT ")


def _process(line: str) -> str | None:
    """The process tag of a vLLM log line ("" untagged), None for other output."""
    found = LOG_LINE.match(line)
    return None if found is None else (found.group("process") or "")


def start_times(stamped: list[tuple[float, str]]) -> dict[str, float]:
    """The seconds at which each phase of STARTS begins, for those the log shows."""
    logged = [(t, line, _process(line)) for t, line in stamped]
    logged = [entry for entry in logged if entry[2] is not None]
    if not logged:
        return {}
    first = logged[0][2]
    boundary = next((i for i, (_, line, process) in enumerate(logged)
                     if process != first or ENGINE_START in line), None)
    found = {FIRST_LINE: 0, CONFIG_DONE: None if boundary is None else max(boundary - 1, 0)}
    times, after = {}, 0
    for name, text in STARTS:
        at = found[text] if text in found else next(
            (i for i in range(after, len(logged)) if text in logged[i][1]), None)
        if at is not None and at >= after:
            times[name] = logged[at][0]
            after = at
    return times


def ready_at(stamped: list[tuple[float, str]]) -> float | None:
    """When the child said its engine had started (READY_PREFIXES), if it did."""
    return next((t for t, line in stamped if line.startswith(READY_PREFIXES)), None)


def phases(stamped: list[tuple[float, str]], ready_s: float) -> dict[str, float]:
    """Seconds per phase (PHASES) of a start that was ready ``ready_s`` seconds after its
    launch; a phase whose first line the log lacks is counted in the one before."""
    starts = start_times([(t, line) for t, line in stamped if t <= ready_s])
    bounds = [("process", 0.0)] + [(name, starts[name]) for name in PHASES[1:]
                                   if name in starts]
    result = {}
    for (name, begin), (_, end) in zip(bounds, bounds[1:] + [("", ready_s)]):
        result[name] = round(max(end - begin, 0.0), 2)
    return result


class Stamped:
    """The lines of a log, each with the seconds since ``started`` (time.perf_counter())
    at which it was first read, while the ``with`` block runs."""

    def __init__(self, log_path: str, started: float | None = None):
        self.log_path = log_path
        self.started = time.perf_counter() if started is None else started
        self.lines: list[tuple[float, str]] = []
        self._offset = 0
        self._partial = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> "Stamped":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the lines read so far stay); a second call does nothing."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        self._read()

    def __enter__(self) -> "Stamped":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            self._read()

    def _read(self) -> None:
        try:
            with open(self.log_path, "rb") as f:
                if f.seek(0, 2) < self._offset:  # written anew (a retried start)
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        self._offset += len(data)
        now = time.perf_counter() - self.started
        *complete, self._partial = (self._partial + data).split(b"\n")
        self.lines += [(now, line.decode(errors="replace")) for line in complete]

    def phases(self, ready_s: float) -> dict[str, float]:
        self._read()
        return phases(self.lines, ready_s)
