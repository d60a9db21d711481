"""Measuring the grid on live servers: one window at a time, in the interleaved order."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from vllm_kimi_eagle.fixtures import corpus
from vllm_kimi_eagle.tools import spec_metrics, vllm_server
from vllm_kimi_eagle.tools.bench_e2e.grid import (
    CONFIGS,
    NONE,
    BenchError,
    bench_server_args,
    schedule,
    server_config,
    server_groups,
)
from vllm_kimi_eagle.tools.bench_e2e.stats import cell, window_problem


def window_requests(prompts: list[str], concurrency: int) -> list[str]:
    """The requests of one window: every prompt, cycled up to the concurrency."""
    return [prompts[i % len(prompts)] for i in range(max(len(prompts), concurrency))]


def measure_window(server: vllm_server.Server, model: str, prompts: list[str],
                   concurrency: int, max_tokens: int) -> dict:
    requests = window_requests(prompts, concurrency)
    before = server.scrape()
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(lambda p: vllm_server.chat(server, model, p, max_tokens), requests))
    seconds = time.perf_counter() - started
    window = server.scrape() - before
    tokens = sum(r["completion_tokens"] for r in done)
    return {
        "requests": len(requests),
        "output_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "tpot_ms": spec_metrics.time_per_output_token_ms(window),
        "counters": spec_metrics.spec_counters(window),
    }


def warm_up(server: vllm_server.Server, model: str, prompts: list[str], grid: dict) -> None:
    measure_window(server, model, prompts, max(grid["concurrency"]), grid["max_tokens"])


def run(args, grid: dict, out: str) -> tuple[list[dict], list[dict]]:
    """Every window of the grid; returns (cells, windows)."""
    from tqdm import tqdm

    prompts = corpus.demo_prompts(grid["prompts"])
    configs = grid["configs"]
    extra = bench_server_args(args.server_args, tiny_default=args.target_is_tiny)
    order = schedule(grid["k"], grid["concurrency"], grid["repeats"], configs,
                     grid["max_servers"])
    windows: list[dict] = []
    progress = tqdm(total=len(order), desc="bench-e2e windows", unit="window",
                    file=sys.stderr, dynamic_ncols=True)
    servers: dict[str, tuple[vllm_server.Server, str]] = {}

    def say(message: str) -> None:
        progress.write(message, file=sys.stderr)  # tqdm.write defaults to stdout

    def start(stack: ExitStack, config: str, k: int) -> None:
        spec = server_config(config, args.draft, k)
        log = os.path.join(out, f"server-{config}" + (f"-k{k}" if spec else "") + ".log")
        env = {**vllm_server.default_env(), **CONFIGS[config].env}
        say(f"starting {config} ({CONFIGS[config].description}"
                       + (f", k={k}" if spec else "") + f"); log {log}")
        started = time.perf_counter()
        server = stack.enter_context(vllm_server.running_server(
            args.target, log, spec, extra, env=env, startup_timeout=args.startup_timeout))
        model = server.model_name()
        warm_up(server, model, prompts, grid)
        say(f"  {config} ready and warmed up in {time.perf_counter() - started:.0f}s")
        progress.unpause()  # the ETA is over measurement windows, not server starts
        servers[config] = (server, model)

    with ExitStack() as whole:
        if NONE in configs:
            start(whole, NONE, 0)
        for k in grid["k"]:
            for g, group in enumerate(server_groups(configs, grid["max_servers"])):
                with ExitStack() as alive:
                    for config in group:
                        start(alive, config, k)
                    for k_, g_, round_, concurrency, config in order:
                        if (k_, g_) != (k, g):
                            continue
                        progress.set_postfix_str(f"k={k} round {round_ + 1} c={concurrency} "
                                                 f"{config}")
                        server, model = servers[config]
                        w = measure_window(server, model, prompts, concurrency,
                                           grid["max_tokens"])
                        problem = window_problem(config, w["counters"])
                        if problem:
                            raise BenchError(f"{problem} (log {server.log_path})")
                        windows.append({"k": k, "group": g, "round": round_,
                                        "concurrency": concurrency, "config": config, **w})
                        progress.update()
    progress.close()
    cells = [cell(config, k, concurrency, windows)
             for k in grid["k"] for concurrency in grid["concurrency"] for config in configs]
    return cells, windows
