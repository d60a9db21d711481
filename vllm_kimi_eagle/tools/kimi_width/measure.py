"""Measuring one Kimi-width engine from outside: its process tree's memory, sampled while it
runs, and each model's weight loading as the probe (``probe/sitecustomize.py``) logs it.

Memory is read from ``/proc/PID/status`` of every process below the engine's: ``RssAnon``
(memory the process allocated, the weights once loaded) and ``VmRSS`` (also the pages of
the safetensors files it maps while loading). The worker is the process with the highest
anonymous peak: the engine core at tensor parallel 1, each rank's worker above.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from vllm_kimi_eagle.cpu import cpu_memory
from vllm_kimi_eagle.tools.engines import engine_process
from vllm_kimi_eagle.tools.engines.vllm_server import descendants

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe")
LOAD_PREFIX = "VLLM_KIMI_EAGLE_LOAD "
SAMPLE_S = 0.2
FIELDS = ("RssAnon", "VmRSS")


def status_kib(pid: int) -> dict[str, int]:
    """RssAnon and VmRSS of a process, in KiB ({} once it has gone)."""
    return cpu_memory.status_kib(pid, FIELDS)


class MemorySampler:
    """Peaks of every process below ``root`` (a pid), sampled every SAMPLE_S seconds until
    stopped: per process, and of their sum."""

    def __init__(self, root: int):
        self.root = root
        self.peaks: dict[int, dict[str, int]] = {}
        self.names: dict[int, str] = {}
        self.total_peak = {k: 0 for k in FIELDS}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_S)

    def sample(self) -> None:
        total = {k: 0 for k in FIELDS}
        for pid in [self.root, *descendants(self.root)]:
            now = status_kib(pid)
            if not now:
                continue
            peak = self.peaks.setdefault(pid, {k: 0 for k in FIELDS})
            for key in FIELDS:
                peak[key] = max(peak[key], now.get(key, 0))
                total[key] += now.get(key, 0)
            if pid not in self.names:
                self.names[pid] = _process_name(pid)
        for key in FIELDS:
            self.total_peak[key] = max(self.total_peak[key], total[key])

    def summary(self) -> dict:
        """GiB: the worker's (highest anonymous) peaks, every process's, and the sum's."""
        gib = 1024 ** 2
        workers = sorted(self.peaks.items(), key=lambda kv: -kv[1]["RssAnon"])
        if not workers:
            return {}
        top = workers[0][1]
        return {"worker_anon_gib": round(top["RssAnon"] / gib, 3),
                "worker_rss_gib": round(top["VmRSS"] / gib, 3),
                "tree_anon_gib": round(self.total_peak["RssAnon"] / gib, 3),
                "processes": [{"name": self.names.get(pid, "?"),
                               "anon_gib": round(p["RssAnon"] / gib, 3),
                               "rss_gib": round(p["VmRSS"] / gib, 3)}
                              for pid, p in workers if p["RssAnon"] > 100 * 1024]}


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def load_lines(log_path: str) -> list[dict]:
    """The probe's line per weight loading in a log, in order (target first, then draft;
    one per rank under tensor parallelism)."""
    try:
        with open(log_path, errors="replace") as f:
            return [json.loads(line.split(LOAD_PREFIX, 1)[1]) for line in f
                    if LOAD_PREFIX in line]
    except OSError:
        return []


def loading(lines: list[dict], draft: str | None) -> dict:
    """Seconds and memory of loading the target and the draft (the slowest rank's), from
    the probe's lines: what loading the draft added to the process's anonymous memory,
    and on a GPU to what torch holds there."""
    def of(model: str | None) -> list[dict]:
        return [l for l in lines if model is not None and os.path.abspath(l["model"])
                == os.path.abspath(model)]

    out = {}
    targets = [l for l in lines if draft is None or os.path.abspath(l["model"])
               != os.path.abspath(draft)]
    if targets:
        out["target_load_s"] = max(l["seconds"] for l in targets)
    drafts = of(draft)
    if drafts:
        slowest = max(drafts, key=lambda l: l["seconds"])
        out["draft_load_s"] = slowest["seconds"]
        out["draft_class"] = slowest["class"]
        # What loading the draft added (the largest rank's): the process's anonymous
        # memory (the CPU build touches each page as it loads), and on a GPU the peak torch
        # reached above what it held before (the parameters exist before loading).
        for after, name in (("RssAnon", "draft_load_anon_gib"),
                            ("cuda_peak", "draft_load_cuda_gib")):
            before = "cuda_allocated" if after == "cuda_peak" else after
            grew = [l["after_kib"][after] - l["before_kib"][before] for l in drafts
                    if after in l["after_kib"] and before in l["before_kib"]]
            if grew:
                out[name] = round(max(grew) / 1024 ** 2, 3)
    return out


def run_case(spec: dict, env: dict, log_path: str, timeout: float) -> dict:
    """Start the engine case in its own process with the probe on its path; its result
    with the memory peaks and the loading figures added."""
    import subprocess

    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([PROBE, *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, "-m", "vllm_kimi_eagle.tools.engines.engine_case",
               json.dumps(spec)]
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    started = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
        with MemorySampler(process.pid) as sampler:
            try:
                process.wait(timeout=timeout)
                result = engine_process.outcome(log_path, process.returncode,
                                                time.perf_counter() - started)
            except subprocess.TimeoutExpired:
                result = engine_process.stopped(timeout, log_path)
            finally:
                engine_process.stop_group(process)
    draft = (spec.get("speculative_config") or {}).get("model")
    result["memory"] = sampler.summary()
    result.update(loading(load_lines(log_path), draft))
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result
