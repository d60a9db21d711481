"""``vllm-kimi-eagle soak``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from contextlib import ExitStack

from vllm_kimi_eagle.compat.vllm_compat import installed_vllm_version
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.figures import request_metrics
from vllm_kimi_eagle.tools.figures.progress import say
from vllm_kimi_eagle.tools.models import model_source
from vllm_kimi_eagle.tools.soak import __doc__ as DESCRIPTION
from vllm_kimi_eagle.tools.soak import bench_serve, checks, report, runner, traffic
from vllm_kimi_eagle.tools.soak.checks import DRAFT, NONE

# The long form (the defaults) and the short form the test suite runs (--short).
# The short form pits one greedy-only window against two mixed ones, each of other prompts:
# its acceptance tolerance allows for one window's spread (docs/serving-under-load.md).
LONG = {"requests": 2000, "window": 40, "greedy_windows": 5, "concurrency": 32,
        "bench_prompts": 64, "min_preemptions": 50, "min_cancellations": 100,
        "acceptance_tolerance": 0.1}
SHORT = {"requests": 96, "window": 32, "greedy_windows": 1, "concurrency": 16,
         "bench_prompts": 8, "min_preemptions": 1, "min_cancellations": 1,
         "acceptance_tolerance": 0.2}
# float32 for the tiny models: a greedy comparison between servers whose batches differ
# is then about speculation, not about bfloat16 near-ties.
TINY_SERVER_ARGS = ["--dtype", "float32", "--enforce-eager"]
BENCH_LENGTHS = (128, 64)  # vllm bench serve: random prompt and output lengths


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle soak", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="target model folder (default: the tiny target)")
    p.add_argument("--draft", help="draft model folder (default: the tiny draft)")
    p.add_argument("--short", action="store_true",
                   help=f"the suite's short form: {SHORT['requests']} requests, windows of "
                        f"{SHORT['window']}, concurrency {SHORT['concurrency']}; values you "
                        "give still win")
    p.add_argument("--requests", type=int, help=f"requests in all (default {LONG['requests']})")
    p.add_argument("--window", type=int, help=f"requests per window, sent as one burst "
                   f"(default {LONG['window']})")
    p.add_argument("--greedy-windows", type=int, help="windows at the start with greedy "
                   f"requests only (default {LONG['greedy_windows']})")
    p.add_argument("--concurrency", type=int, help="requests in flight per server (default "
                   f"{LONG['concurrency']})")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens (default 3)")
    p.add_argument("--max-model-len", type=int, default=512,
                   help="the servers' context length; some prompts fill it (default 512)")
    p.add_argument("--kv-blocks", type=int, default=64,
                   help="KV cache blocks per server (--num-gpu-blocks-override), small so "
                        "that bursts make vLLM preempt (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the request plan (default 0)")
    p.add_argument("--server-args", type=shlex.split, default=None,
                   help="arguments for both servers, e.g. \"--tensor-parallel-size 8 "
                        "--trust-remote-code\" (default for the tiny models: "
                        f"{' '.join(TINY_SERVER_ARGS)})")
    p.add_argument("--startup-timeout", type=float, default=vllm_server.DEFAULT_STARTUP_TIMEOUT)
    p.add_argument("--acceptance-tolerance", type=float,
                   help="largest allowed acceptance difference between the greedy-only and "
                        f"the mixed windows (default {LONG['acceptance_tolerance']}, "
                        f"{SHORT['acceptance_tolerance']} with --short)")
    p.add_argument("--rss-limit", type=float, default=0.05,
                   help="largest allowed RSS growth, last third vs first third (default 0.05)")
    p.add_argument("--min-preemptions", type=int,
                   help=f"preemptions the draft server must show (default {LONG['min_preemptions']})")
    p.add_argument("--min-cancellations", type=int,
                   help=f"client cancellations the run must have (default {LONG['min_cancellations']})")
    p.add_argument("--bench-prompts", type=int, help="prompts per vllm bench serve run, 0 to "
                   f"skip it (default {LONG['bench_prompts']})")
    p.add_argument("--out", default="out/soak")
    args = p.parse_args(argv)
    if bool(args.target) != bool(args.draft):
        p.error("give both --target and --draft, or neither (the tiny models)")
    for key, value in (SHORT if args.short else LONG).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("requests", "window", "concurrency", "k", "max_model_len", "kv_blocks"):
        if getattr(args, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be at least 1, got {getattr(args, key)}")
    if args.greedy_windows * args.window >= args.requests:
        p.error(f"--greedy-windows {args.greedy_windows} x --window {args.window} leaves no "
                f"mixed window among {args.requests} requests")
    return args


def server_args(args) -> list[str]:
    user = args.server_args if args.server_args is not None else (
        TINY_SERVER_ARGS if args.tiny else [])
    return vllm_server.server_args(user, defaults=(
        ("--seed", "0"), ("--max-model-len", str(args.max_model_len)),
        ("--num-gpu-blocks-override", str(args.kv_blocks))))


def start_servers(stack: ExitStack, args, out: str) -> dict[str, vllm_server.Server]:
    spec = {"method": "eagle3", "model": args.draft, "num_speculative_tokens": args.k}
    servers = {}
    for name, speculative in ((NONE, None), (DRAFT, spec)):
        log = os.path.join(out, f"server-{name}.log")
        say(f"soak: starting the {name} server (log {log})")
        extra = server_args(args) + request_metrics.server_args(
            speculative is not None, installed_vllm_version())
        servers[name] = stack.enter_context(vllm_server.running_server(
            args.target, log, speculative, extra, env=vllm_server.default_env(),
            startup_timeout=args.startup_timeout))
    return servers


def token_counter(server: vllm_server.Server, model: str):
    def count(text: str) -> int:
        return int(server.post("/tokenize", {"model": model, "prompt": text})["count"])
    return count


def run_windows(servers, model: str, plan: list, args, memory) -> tuple[dict, list]:
    outcomes: dict[str, dict] = {name: {} for name in servers}
    windows = []
    count = max(r.window for r in plan) + 1
    for index in range(count):
        requests = [r for r in plan if r.window == index]
        got, seen = runner.run_window(index, servers, model, requests, args.concurrency)
        for name, results in got.items():
            outcomes[name].update({o.id: o for o in results})
        windows += seen
        if index + 1 == args.greedy_windows:
            memory.mark()  # warm-up over: memory is judged from here
        draft = next(w for w in seen if w.server == DRAFT)
        mismatches = sum(1 for r in requests if checks.comparable(
            r, outcomes[DRAFT][r.id], outcomes[NONE][r.id]) and checks.greedy_difference(
            outcomes[DRAFT][r.id], outcomes[NONE][r.id]))
        say(f"soak: window {index + 1}/{count} ({'greedy only' if index < args.greedy_windows else 'mixed'}, "
            f"{len(requests)} requests) {draft.seconds:.0f}s, acceptance "
            f"{draft.counters['acceptance_length']}, preemptions {draft.preemptions:.0f}, "
            f"greedy mismatches {mismatches}")
    return outcomes, windows


def run_bench(servers, model: str, tokenizer: str, args, out: str) -> dict:
    if not args.bench_prompts:
        return {}
    input_len, output_len = BENCH_LENGTHS
    bench = {"settings": f"random {input_len} in / {output_len} out, greedy, ignore_eos, "
                         f"{args.bench_prompts} prompts, concurrency {args.concurrency}"}
    for name, server in servers.items():
        say(f"soak: vllm bench serve against the {name} server")
        bench[name] = bench_serve.run(server.base_url, model, tokenizer, args.bench_prompts,
                                      args.concurrency, input_len, output_len,
                                      os.path.join(out, "bench-serve"), name)
    return bench


def alive(server: vllm_server.Server) -> bool:
    try:
        server.get("/health", timeout=10)
    except OSError:
        return False
    return server.process.poll() is None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    args.tiny = not args.target
    if args.tiny:
        from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models

        folder = ensure_tiny_models()
        args.target, args.draft = os.path.join(folder, "target"), os.path.join(folder, "draft")
    else:
        args.target = model_source.local_folder(args.target, "--target")
        args.draft = model_source.local_folder(args.draft, "--draft")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    planned = traffic.plan(args.seed, args.requests, args.window, args.greedy_windows,
                           args.max_model_len)
    say(f"soak: {args.target} with and without {args.draft} (k={args.k}); {args.requests} "
        f"requests in windows of {args.window} ({args.greedy_windows} greedy-only), "
        f"concurrency {args.concurrency}; server args: {' '.join(server_args(args))}")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        with ExitStack() as stack:
            servers = start_servers(stack, args, out)
            model = servers[NONE].model_name()
            planned = traffic.fit(planned, token_counter(servers[NONE], model))
            pids = {name: s.process.pid for name, s in servers.items()}
            with runner.MemorySampler(pids) as memory:
                outcomes, windows = run_windows(servers, model, planned, args, memory)
            up = {name: alive(server) for name, server in servers.items()}
            bench = run_bench(servers, model, args.target, args, out)
    except vllm_server.ServerError as err:
        say(f"vllm-kimi-eagle soak: {err}")
        return 2
    results = [
        checks.servers_up(up),
        checks.answers(planned, outcomes),
        checks.greedy_identical(planned, outcomes),
        checks.drafts_throughout(windows),
        checks.acceptance_mixed_vs_greedy(planned, windows, args.acceptance_tolerance),
        checks.counts(planned, outcomes, windows, args.min_preemptions, args.min_cancellations),
        checks.drained(windows),
        checks.memory_flat(memory.samples, args.rss_limit, memory.warm_from),
    ]
    elapsed = time.perf_counter() - started
    summary = {"settings": {k: v for k, v in vars(args).items() if k != "server_args"},
               "server_args": server_args(args), "checks": results, "bench_serve": bench,
               "elapsed_s": round(elapsed), "memory": memory.samples,
               "memory_judged_from_s": memory.warm_from,
               "passed": all(c["passed"] for c in results),
               "per_request": report.per_request(outcomes.get(DRAFT, {}), args.k)}
    written = report.write(out, summary, windows, outcomes, planned)
    print(report.format_windows(windows))
    print(report.format_per_request(summary["per_request"]))
    print(report.format_checks(results))
    if bench:
        print(report.format_bench(bench))
    print(f"\nsoak {'PASSED' if summary['passed'] else 'FAILED'} in {elapsed:.0f}s; wrote "
          f"{', '.join(written)}")
    print(json.dumps({"passed": summary["passed"],
                      "failed": [c["name"] for c in results if not c["passed"]]}))
    return 0 if summary["passed"] else 1
