"""``vllm-kimi-eagle bench-e2e``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.tools.bench_e2e import __doc__ as DESCRIPTION
from vllm_kimi_eagle.tools.bench_e2e import k_schedule
from vllm_kimi_eagle.tools.bench_e2e.chart import write_png
from vllm_kimi_eagle.tools.bench_e2e.grid import (
    CONFIGS,
    DEFAULTS,
    NONE,
    PLUGIN,
    QUICK,
    BenchError,
    bench_server_args,
    plugin_problem,
    running_servers,
    settings,
)
from vllm_kimi_eagle.tools.bench_e2e.measure import run
from vllm_kimi_eagle.tools.engines import vllm_runners, vllm_server
from vllm_kimi_eagle.tools.models import model_source

# Without --target: the tiny Kimi-cost target (Kimi's depth and decode cost) and its draft.
TINY_MODELS = ("target-kimi-cost", "draft-kimi-cost")
from vllm_kimi_eagle.tools.bench_e2e.report import format_report, format_schedule, write_json


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from err
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _positive(text: str) -> int:
    values = _int_list(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"expected one positive integer, got {text!r}")
    return values[0]


def _config_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown config(s) {unknown or text!r}; choose from "
                                         f"{', '.join(CONFIGS)}")
    return [n for n in CONFIGS if n in names]  # a fixed order: none first


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle bench-e2e", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="target model (default: the tiny Kimi-cost target)")
    p.add_argument("--draft", help="draft model (default: the tiny Kimi-cost draft)")
    p.add_argument("--k", type=_int_list, help=f"num_speculative_tokens values (default "
                   f"{','.join(map(str, DEFAULTS['k']))})")
    p.add_argument("--concurrency", type=_int_list, help="client concurrencies (default "
                   f"{','.join(map(str, DEFAULTS['concurrency']))})")
    p.add_argument("--repeats", type=_positive, help=f"interleaved repeats per cell (default "
                   f"{DEFAULTS['repeats']})")
    p.add_argument("--max-tokens", type=_positive, help=f"output tokens per request (default "
                   f"{DEFAULTS['max_tokens']})")
    p.add_argument("--prompts", type=_positive, help=f"distinct prompts per window (default "
                   f"{DEFAULTS['prompts']})")
    p.add_argument("--configs", type=_config_list,
                   help=f"subset of {','.join(CONFIGS)} (default "
                        f"{','.join(DEFAULTS['configs'])})")
    p.add_argument("--max-servers", type=_positive,
                   help="servers alive at once, the no-speculation ones included (default: "
                        "all configurations of one k together; --quick: 4). Configurations "
                        "not alive together are compared through their speedups over no "
                        "speculation, each measured in its own interleaved rounds")
    p.add_argument("--server-args", type=shlex.split, default=[],
                   help="arguments for every server, e.g. \"--tensor-parallel-size 8 "
                        "--trust-remote-code\"; the command adds only --seed 0 unless you "
                        "give --seed (and --enforce-eager for the tiny models when you give "
                        "none)")
    p.add_argument("--startup-timeout", type=float, default=vllm_server.DEFAULT_STARTUP_TIMEOUT,
                   help=f"seconds each server may take to become healthy (default "
                        f"{vllm_server.DEFAULT_STARTUP_TIMEOUT})")
    p.add_argument("--quick", action="store_true",
                   help=f"a small grid (k {QUICK['k']}, concurrency {QUICK['concurrency']}, "
                        f"{QUICK['repeats']} repeats, configs {','.join(QUICK['configs'])}); "
                        "values you give still win")
    p.add_argument("--schedule", action="store_true",
                   help="derive a num_speculative_tokens_per_batch_size schedule from the "
                        "measured best k per concurrency, serve it beside no speculation and "
                        "the best fixed k, and write OUT/schedule.json and OUT/summary.json")
    p.add_argument("--url", action="append", default=[],
                   help="a server already running for one cell of the grid (repeatable): "
                        "CONFIG[:K]=URL, e.g. none=http://10.0.0.1:8000 "
                        "plugin:3=http://10.0.0.2:8000; the grid's configurations and k "
                        "are those given (each speculative one at every k). Instead of "
                        "--target, --draft, --k, --configs and --server-args; no --schedule")
    p.add_argument("--out", default="out/bench-e2e")
    args = p.parse_args(argv)
    args.urls = {}
    if args.url:
        given = [name for name in ("target", "draft", "k", "configs", "max_servers")
                 if getattr(args, name) is not None] + \
            ["server_args"] * bool(args.server_args) + ["schedule"] * args.schedule
        if given:
            p.error(f"--url measures servers already running: give no "
                    f"{', '.join('--' + g.replace('_', '-') for g in given)} with it")
        try:
            args.urls = running_servers(args.url)
        except ValueError as err:
            p.error(str(err))
        args.k = sorted({k for _, k in args.urls if k is not None})
        args.configs = [c for c in CONFIGS if any(c == config for config, _ in args.urls)]
    elif bool(args.target) != bool(args.draft):
        p.error("give both --target and --draft, or neither (the tiny models)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    args.target_is_tiny = not args.target and not args.urls
    if args.urls:
        args.target = args.draft = None
    elif args.target_is_tiny:
        from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models

        folder = ensure_tiny_models()
        args.target, args.draft = (os.path.join(folder, name) for name in TINY_MODELS)
    else:
        args.target = model_source.local_folder(args.target, "--target")
        args.draft = model_source.local_folder(args.draft, "--draft")
    grid = settings(args)
    problem = None if args.urls else plugin_problem(grid["configs"], os.environ) or (
        schedule_problem(grid["configs"], os.environ, args.server_args,
                         vllm_server.cpu_platform()) if args.schedule else None)
    if problem:
        print(f"vllm-kimi-eagle bench-e2e: {problem}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    served = (f"servers at {', '.join(sorted(set(args.urls.values())))}" if args.urls
              else f"{args.target} with {args.draft}")
    print(f"bench-e2e: {served}; k {grid['k']}, concurrency "
          f"{grid['concurrency']}, {grid['repeats']} repeats, {grid['prompts']} prompts x "
          f"{grid['max_tokens']} tokens, configs {','.join(grid['configs'])}, servers at once: "
          f"{grid['max_servers'] or 'all of one k'}; server args: "
          f"{' '.join(bench_server_args(args.server_args, args.target_is_tiny))}",
          file=sys.stderr, flush=True)
    # A killed benchmark stops its servers (they run in sessions of their own): SIGTERM
    # becomes SystemExit, which unwinds through every running_server.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        result = run(args, grid, out, schedule=args.schedule)
    except (BenchError, vllm_server.ServerError) as err:
        print(f"vllm-kimi-eagle bench-e2e: {err}", file=sys.stderr)
        return 2
    cells, windows, part = result["cells"], result["windows"], result.get("schedule")
    elapsed = time.perf_counter() - started
    json_path, png_path = os.path.join(out, "bench-e2e.json"), os.path.join(out, "bench-e2e.png")
    write_json(json_path, grid, args, cells, windows, elapsed, part)
    write_png(png_path, cells)
    print(format_report(cells, windows))
    written = [json_path, png_path]
    if part is not None:
        rows = k_schedule.summary(part)
        print(format_schedule(part, rows))
        written += write_schedule(out, part, rows)
    print(f"\nwrote {', '.join(written)}; elapsed {elapsed:.0f}s")
    return 0


def schedule_problem(configs: list[str], environ, server_args: list[str] = (),
                     on_cpu: bool = True) -> str | None:
    """Why --schedule cannot run with these configurations, or why this vLLM would not
    serve the schedule it derives as written, before any server starts."""
    missing = [c for c in (NONE, PLUGIN) if c not in configs]
    if missing:
        return (f"--schedule derives the schedule from the configs none and plugin; add "
                f"{','.join(missing)} to --configs")
    if vllm_compat.dynamic_schedule_validator() is None:
        return (f"vLLM {vllm_compat.installed_vllm_version()} has no "
                "num_speculative_tokens_per_batch_size (dynamic speculation): --schedule needs "
                "a release that has it")
    problem = vllm_runners.schedule_problem(vllm_runners.serving_runner(environ, on_cpu),
                                           data_parallel_size(server_args))
    return f"a k schedule would not be served as written: {problem}" if problem else None


def data_parallel_size(server_args: list[str]) -> int:
    """--data-parallel-size / -dp among vLLM server arguments (1 when absent)."""
    for i, arg in enumerate(server_args):
        name, _, value = arg.partition("=")
        if name in ("--data-parallel-size", "-dp"):
            value = value or (server_args[i + 1] if i + 1 < len(server_args) else "")
            try:
                return int(value)
            except ValueError:
                return 1  # vLLM's own parser will say what is wrong
    return 1


def write_schedule(out: str, part: dict, rows: list[dict]) -> list[str]:
    """schedule.json (the --speculative-config that serves the schedule, ready to paste)
    and summary.json; no schedule.json when the schedule is served without a draft."""
    paths = []
    if part["speculative_config"] is not None:
        paths.append(os.path.join(out, "schedule.json"))
        with open(paths[-1], "w") as f:
            json.dump(part["speculative_config"], f)
    paths.append(os.path.join(out, "summary.json"))
    with open(paths[-1], "w") as f:
        json.dump({"per_concurrency": rows, "schedule": part["schedule"],
                   "speculative_config": part["speculative_config"],
                   "best_k": part["best_k"], "batch": part["batch"],
                   "validated": part["validated"], "skipped": part.get("skipped")}, f, indent=2)
    return paths
