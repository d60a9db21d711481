"""Measuring on live servers: one window at a time, in the interleaved order, each
server measured alone.

Isolation: every server is alive for its part of the run, but while one is measured the
others are frozen (SIGSTOP to their process groups) and use no CPU, so a window's figure
is its server's and the machine's, not its neighbours'. Between windows the measured
server is frozen again. (On a CPU every vLLM server binds its engine to the same core;
alive together, servers took turns on it and two measurements of one configuration
differed by up to 2x.)
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from vllm_kimi_eagle.fixtures import corpus
from vllm_kimi_eagle.tools import spec_metrics, vllm_server
from vllm_kimi_eagle.tools.bench_e2e import k_schedule
from vllm_kimi_eagle.tools.bench_e2e.grid import (
    AA,
    BASELINES,
    CONFIGS,
    NONE,
    PLUGIN,
    SCHEDULE,
    BenchError,
    bench_server_args,
    schedule_config,
    server_config,
    server_groups,
    window_order,
)
from vllm_kimi_eagle.tools.bench_e2e.stats import best_k, cell, speedup_rows, window_problem


def window_requests(prompts: list[str], concurrency: int) -> list[str]:
    """The requests of one window: every prompt, cycled up to the concurrency."""
    return [prompts[i % len(prompts)] for i in range(max(len(prompts), concurrency))]


# How often a window polls the server's running requests (its batch size).
POLL_S = 0.1


def poll_running(server: vllm_server.Server, stop: threading.Event) -> list[float | None]:
    """The server's running requests, polled until ``stop`` is set."""
    samples = []
    while not stop.wait(POLL_S):
        try:
            samples.append(spec_metrics.running_requests(server.get("/metrics", timeout=5)))
        except OSError:
            samples.append(None)
    return samples


def measure_window(server: vllm_server.Server, model: str, prompts: list[str],
                   concurrency: int, max_tokens: int) -> dict:
    requests = window_requests(prompts, concurrency)
    before = server.scrape()
    stop = threading.Event()
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency + 1) as pool:
        polled = pool.submit(poll_running, server, stop)
        done = list(pool.map(lambda p: vllm_server.chat(server, model, p, max_tokens), requests))
        stop.set()
    seconds = time.perf_counter() - started
    window = server.scrape() - before
    tokens = sum(r["completion_tokens"] for r in done)
    return {
        "requests": len(requests),
        "output_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "tpot_ms": spec_metrics.time_per_output_token_ms(window),
        "batch": spec_metrics.mean_batch(polled.result()),
        "counters": spec_metrics.spec_counters(window),
    }


class LiveServers:
    """The run's servers by name; ``window`` measures one with every other frozen."""

    def __init__(self, args, grid: dict, out: str, progress):
        self.args, self.grid, self.out, self.progress = args, grid, out, progress
        self.prompts = corpus.demo_prompts(grid["prompts"])
        self.extra = bench_server_args(args.server_args, tiny_default=args.target_is_tiny)
        self.servers: dict[str, tuple[vllm_server.Server, str]] = {}

    def say(self, message: str) -> None:
        self.progress.write(message, file=sys.stderr)  # tqdm.write defaults to stdout

    def start(self, stack: ExitStack, name: str, config: str, spec: dict | None) -> None:
        log = os.path.join(self.out, f"server-{name}.log")
        env = {**vllm_server.default_env(), **CONFIGS[PLUGIN if config == SCHEDULE
                                                      else config].env}
        self.say(f"starting {name} ({CONFIGS[config].description if config in CONFIGS else config}"
                 f"); log {log}")
        started = time.perf_counter()
        self.pause_all()
        server = stack.enter_context(vllm_server.running_server(
            self.args.target, log, spec, self.extra, env=env,
            startup_timeout=self.args.startup_timeout))
        model = server.model_name()
        measure_window(server, model, self.prompts, max(self.grid["concurrency"]),
                       self.grid["max_tokens"])  # warm-up, not measured
        server.pause()
        stack.callback(self.servers.pop, name, None)
        self.servers[name] = (server, model)
        self.say(f"  {name} ready and warmed up in {time.perf_counter() - started:.0f}s")
        self.progress.unpause()  # the ETA is over measurement windows, not server starts

    def pause_all(self) -> None:
        for server, _ in self.servers.values():
            server.pause()

    def window(self, name: str, config: str, concurrency: int,
               must_draft: bool | None = None) -> dict:
        """One measured window of server ``name``; its drafts are checked against
        ``config`` (or ``must_draft`` where given: True, False, or None for no check)."""
        server, model = self.servers[name]
        self.pause_all()
        server.resume()
        try:
            w = measure_window(server, model, self.prompts, concurrency,
                               self.grid["max_tokens"])
        finally:
            server.pause()
        problem = window_problem(config, w["counters"], must_draft)
        if problem:
            raise BenchError(f"{problem} (log {server.log_path})")
        self.progress.update()
        return w


def run(args, grid: dict, out: str, schedule: bool = False) -> dict:
    """Every window of the grid, then (``schedule``) the derived k schedule against no
    speculation and the best fixed k. Returns cells, windows and the schedule part."""
    from tqdm import tqdm

    configs = grid["configs"]
    order = window_order(grid["k"], grid["concurrency"], grid["repeats"], configs,
                         grid["max_servers"])
    progress = tqdm(total=len(order), desc="bench-e2e windows", unit="window",
                    file=sys.stderr, dynamic_ncols=True)
    live = LiveServers(args, grid, out, progress)
    windows: list[dict] = []
    result: dict = {}
    with ExitStack() as whole, ExitStack() as aa:
        for name in (c for c in configs if c in BASELINES):
            live.start(aa if name == AA else whole, name, name, None)
        for k in grid["k"]:
            for g, group in enumerate(server_groups(configs, grid["max_servers"])):
                with ExitStack() as alive:
                    for config in group:
                        live.start(alive, config, config, server_config(config, args.draft, k))
                    for k_, g_, round_, concurrency, config in order:
                        if (k_, g_) != (k, g):
                            continue
                        progress.set_postfix_str(f"k={k} round {round_ + 1} c={concurrency} "
                                                 f"{config}")
                        w = live.window(config, config, concurrency)
                        windows.append({"k": k, "group": g, "round": round_,
                                        "concurrency": concurrency, "config": config, **w})
        result["cells"] = [cell(config, k, concurrency, windows) for k in grid["k"]
                           for concurrency in grid["concurrency"] for config in configs]
        result["windows"] = windows
        if schedule:
            aa.close()  # the A/A server has done its job; the schedule's servers take its place
            result["schedule"] = run_schedule(args, grid, live, whole, result["cells"],
                                              windows, progress)
    progress.close()
    return result


def run_schedule(args, grid, live: LiveServers, stack: ExitStack, cells, windows,
                 progress) -> dict:
    """Derive the schedule from the grid's best k per concurrency and the batch sizes the
    no-speculation server ran, then measure it beside no speculation and each best fixed
    k, in interleaved rounds of their own."""
    rows = speedup_rows(cells)
    best = {c: best_k(rs)[0] for c, rs in rows.items()}
    batch = k_schedule.measured_batch(windows, NONE)
    schedule = k_schedule.derive(best, batch)
    checked = k_schedule.validate(schedule)
    part = {"best_k": best, "batch": batch, "schedule": schedule, "validated": checked,
            "windows": []}
    live.say(f"schedule from best k {best} at batch sizes {batch}: {schedule} ({checked})")
    if max(k for _, _, k in schedule) == 0:
        # Still served (with the grid's smallest k, never used): what the schedule would
        # cost against no speculative config at all, which is the advice.
        part["skipped"] = ("no k beats no speculation at any concurrency: serve without a "
                           "draft (no schedule.json); the all-zero schedule is measured "
                           "below for its cost")
    fixed = sorted({k for k in best.values() if k})
    rounds = {c: [NONE, SCHEDULE] + ([f"fixed-k{best[c]}"] if best.get(c) else [])
              for c in grid["concurrency"]}
    progress.total += grid["repeats"] * sum(len(names) for names in rounds.values())
    live.start(stack, SCHEDULE, SCHEDULE,
               schedule_config(args.draft, schedule, at_least=min(grid["k"])))
    for k in fixed:
        live.start(stack, f"fixed-k{k}", PLUGIN, server_config(PLUGIN, args.draft, k))
    for round_ in range(grid["repeats"]):
        for i, concurrency in enumerate(grid["concurrency"]):
            names = rounds[concurrency]
            shift = (round_ + i) % len(names)
            for name in names[shift:] + names[:shift]:
                progress.set_postfix_str(f"schedule round {round_ + 1} c={concurrency} {name}")
                config, must_draft = _schedule_check(name, schedule, batch.get(concurrency))
                w = live.window(name, config, concurrency, must_draft)
                part["windows"].append({"round": round_, "concurrency": concurrency,
                                        "name": name, **w})
    return part


def _schedule_check(name: str, schedule: list[list[int]], batch: float | None):
    """(config, must_draft) for a window of the schedule phase. The schedule must draft
    where it gives k > 0 at the measured batch; where it gives 0, a window may still draft
    while the batch ramps up or drains through sizes with k > 0, so nothing is checked."""
    if name != SCHEDULE:
        return (NONE if name == NONE else PLUGIN), None
    return SCHEDULE, (True if k_schedule.k_for_batch(schedule, batch or 1) > 0 else None)
