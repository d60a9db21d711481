"""Driving the soak: each window's requests sent to every server at once, what each server's
``/metrics`` and memory say around it.

A window is a burst: all its requests are sent together, at most ``concurrency`` in flight
per server, so a window larger than the KV cache makes vLLM preempt. Both servers get the
same window at the same time. After it, each server must drain (no request left running
or waiting: a cancelled stream must have been aborted) before its counters are read.
Memory is the resident set of the server's whole process group (API server, engine core),
sampled once a second by a thread while the soak runs; it is judged from the end of the
greedy-only windows, which warm the servers up (allocator pools and caches grow in the
first minutes of any vLLM server, with a draft or without).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

from vllm_kimi_eagle.cpu.cpu_memory import status_kib
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.figures import spec_metrics
from vllm_kimi_eagle.tools.soak.client import Outcome, send
from vllm_kimi_eagle.tools.soak.traffic import Request

PREEMPTIONS = "vllm:num_preemptions_total"
WAITING = "vllm:num_requests_waiting"
DRAIN_SECONDS = 60  # how long a server may take to finish aborting after a window
REQUEST_TIMEOUT = 900


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and every process below it (from /proc; 0 without)."""
    return sum(status_kib(each, ("VmRSS",)).get("VmRSS", 0) * 1024
               for each in [pid, *vllm_server.descendants(pid)])


class MemorySampler:
    """RSS of each server's process group, once a second, in a thread of its own, with the
    moment warm-up ended (``mark``): samples are (seconds since the start, bytes)."""

    def __init__(self, pids: dict[str, int], every: float = 1.0):
        self.pids, self.every = pids, every
        self.samples: dict[str, list[tuple[float, int]]] = {name: [] for name in pids}
        self.warm_from = 0.0
        self._started = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def elapsed(self) -> float:
        return round(time.perf_counter() - self._started, 1)

    def mark(self) -> None:
        self.warm_from = self.elapsed()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                self.samples[name].append((self.elapsed(), rss_bytes(pid)))
            self._stop.wait(self.every)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclasses.dataclass
class Window:
    """One server's view of one window."""

    index: int
    server: str
    seconds: float
    preemptions: float
    counters: dict            # spec-decode counters of the window (SpecCounters.summary())
    drained: bool             # nothing running or waiting after it
    rss: int


def _queue(scrape: spec_metrics.Scrape) -> float:
    return scrape.total(spec_metrics.RUNNING) + scrape.total(WAITING)


def drain(server: vllm_server.Server, timeout: float = DRAIN_SECONDS) -> spec_metrics.Scrape:
    """The server's metrics once nothing is running or waiting (or when ``timeout`` ends)."""
    deadline = time.perf_counter() + timeout
    scrape = server.scrape()
    while _queue(scrape) > 0 and time.perf_counter() < deadline:
        time.sleep(0.2)
        scrape = server.scrape()
    return scrape


async def _send_all(server: vllm_server.Server, model: str, requests: list[Request],
                    concurrency: int) -> list[Outcome]:
    import openai

    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="soak",
                                max_retries=0, timeout=REQUEST_TIMEOUT)
    gate = asyncio.Semaphore(concurrency)

    async def one(request: Request) -> Outcome:
        async with gate:
            return await send(client, model, request)

    try:
        return await asyncio.gather(*(one(r) for r in requests))
    finally:
        await client.close()


async def _window_on_all(servers: dict[str, vllm_server.Server], model: str,
                         requests: list[Request], concurrency: int) -> dict[str, list[Outcome]]:
    names = list(servers)
    results = await asyncio.gather(*(_send_all(servers[n], model, requests, concurrency)
                                     for n in names))
    return dict(zip(names, results))


def run_window(index: int, servers: dict[str, vllm_server.Server], model: str,
               requests: list[Request], concurrency: int
               ) -> tuple[dict[str, list[Outcome]], list[Window]]:
    """Send one window to every server at once; each server's outcomes and Window."""
    before = {name: drain(server) for name, server in servers.items()}
    started = time.perf_counter()
    outcomes = asyncio.run(_window_on_all(servers, model, requests, concurrency))
    seconds = time.perf_counter() - started
    windows = []
    for name, server in servers.items():
        after = drain(server)
        delta = after - before[name]
        windows.append(Window(
            index=index, server=name, seconds=round(seconds, 2),
            preemptions=delta.total(PREEMPTIONS),
            counters=spec_metrics.spec_counters(delta).summary(),
            drained=_queue(after) == 0,
            rss=rss_bytes(server.process.pid) if server.process else 0))
    return outcomes, windows
