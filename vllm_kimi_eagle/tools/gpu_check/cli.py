"""``vllm-kimi-eagle gpu-check``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.tools.bench_e2e.grid import BenchError
from vllm_kimi_eagle.tools.engines import engine_process, vllm_runners, vllm_server
from vllm_kimi_eagle.tools.engines.engine_case import Check, log_facts, tripped_on_neighbours
from vllm_kimi_eagle.tools.figures.progress import say
from vllm_kimi_eagle.tools.gpu_check import __doc__ as DESCRIPTION
from vllm_kimi_eagle.tools.gpu_check.matrix import BASE, QUANTIZED, Case, matrix
from vllm_kimi_eagle.tools.gpu_check.verdicts import case_checks, format_table, report_rows

# The lifted Kimi-width drafts the GPU case serves by default (with their controls): the
# full-vocabulary EAGLE3.1 layout and the odd pruned vocabulary with d2t (the K3 draft adds
# 5 GB and two engines).
KIMI_WIDTH_DRAFTS = ("draft-k26-eagle3.1", "draft-pruned-odd")
NEEDS = ("gpu-check needs a CUDA GPU and the CUDA build of vLLM (pip install vllm); "
         "this machine has {found}.")
# The GPU MLA prefill backends accept only these head dims (Kimi's and DeepSeek's).
GPU_HEAD_DIMS = {"qk_nope_head_dim": 128, "v_head_dim": 128}
CASE_TIMEOUT_S = 1200


def cuda_problem() -> str | None:
    """Why this machine cannot run the GPU matrix, or None."""
    try:
        import torch
    except ImportError:
        return NEEDS.format(found="no torch")
    if not torch.cuda.is_available():
        return NEEDS.format(found=f"no CUDA GPU visible to torch {torch.__version__}")
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return NEEDS.format(found="no vLLM installed")
    if not current_platform.is_cuda():
        return NEEDS.format(found=f"a vLLM build for {current_platform.device_type}")
    return None


def head_dims_problem(models: str) -> str | None:
    with open(os.path.join(models, "target", "config.json")) as f:
        config = json.load(f)
    wrong = {k: config.get(k) for k, v in GPU_HEAD_DIMS.items() if config.get(k) != v}
    if not wrong:
        return None
    return (f"{models}/target/config.json has {wrong}; vLLM's GPU MLA backends need "
            f"{GPU_HEAD_DIMS}. Rebuild the tiny models with this release's builder "
            "(vllm-kimi-eagle build-tiny --force) or point --models to such a build.")


def run_case(case: Case, args, models: str, out: str) -> tuple[dict, str]:
    """Start the case's engine in its own process; (result, log text)."""
    from vllm_kimi_eagle.fixtures import corpus

    spec = {"target": os.path.join(models, "target"),
            "speculative_config": case.speculative_config(models, args.k),
            "prompts": corpus.demo_prompts(args.prompts), "max_tokens": args.max_tokens,
            "tensor_parallel": case.tensor_parallel,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "enforce_eager": args.enforce_eager, "dtype": args.dtype}
    safe = case.name.replace("/", "_")
    env = {**os.environ, **case.env(), "VLLM_CACHE_ROOT": os.path.join(out, "cache", safe)}
    log_path = os.path.join(out, "logs", f"{safe}.log")
    result = engine_process.run(
        [sys.executable, "-m", "vllm_kimi_eagle.tools.engines.engine_case", json.dumps(spec)],
        log_path, env, CASE_TIMEOUT_S)
    with open(log_path, errors="replace") as f:
        return result, f.read()


def run_matrix(cases: list[Case], args, models: str, out: str):
    results, facts = {}, {}
    started = time.perf_counter()

    def one(case: Case):
        result, text = run_case(case, args, models, out)
        facts[case.name] = log_facts(text, started="error" not in result)
        results[case.name] = result
        done = len(results)
        eta = (time.perf_counter() - started) / done * (len(cases) - done)
        status = "error" if "error" in result else f"acceptance {result.get('acceptance_length')}"
        say(f"[{done}/{len(cases)}] {case.name}: {status} (ETA {eta:.0f} s)")

    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(one, cases))
    raced = [c for c in cases if tripped_on_neighbours(results[c.name])]
    for case in raced:  # again, alone on the GPU
        say(f"{case.name}: vLLM's memory profiling counted another engine's GPU memory; "
            "starting it again alone")
        del results[case.name]
        one(case)
        results[case.name]["retried_alone"] = True
    return results, facts


def timing(args, models: str, out: str) -> dict:
    """Tokens/s of no draft, the plugin and the in-tree class on live servers, in
    interleaved rounds (bench-e2e's measurement, the runner vLLM picks)."""
    from vllm_kimi_eagle.tools.bench_e2e.measure import run
    from vllm_kimi_eagle.tools.bench_e2e.report import format_report

    grid = {"k": [args.k], "concurrency": [1, 16], "repeats": args.timing_repeats,
            "max_tokens": args.timing_tokens, "prompts": args.prompts,
            "configs": ["none", "plugin", "in-tree"], "max_servers": None}
    server_args = ["--gpu-memory-utilization", str(args.gpu_memory_utilization),
                   "--max-model-len", "1024"]
    if args.enforce_eager:
        server_args.append("--enforce-eager")
    if args.dtype:
        server_args += ["--dtype", args.dtype]
    bench_args = SimpleNamespace(target=os.path.join(models, "target"),
                                 draft=os.path.join(models, BASE), server_args=server_args,
                                 startup_timeout=CASE_TIMEOUT_S, target_is_tiny=False)
    result = run(bench_args, grid, os.path.join(out, "timing"))
    return {"grid": grid, "cells": result["cells"],
            "report": format_report(result["cells"], result["windows"])}


def schedule_support(version) -> dict[str, str]:
    """Per runner, whether this vLLM serves a k schedule as written (data: vllm_compat)."""
    return {runner: vllm_runners.schedule_problem(runner, 1, version) or "served as written"
            for runner in ("v1", "v2")}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle gpu-check", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help="tiny models folder (default: build or reuse the cache)")
    p.add_argument("--out", default="out/gpu-check")
    p.add_argument("--cases", default="",
                   help="only cases whose name contains one of these comma-separated texts, "
                        "e.g. default/,v1/ (the matrix split over several runs)")
    p.add_argument("--parallel", type=int, default=3, help="engines at once (default 3)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.12,
                   help="per engine (default 0.12: the tiny models need little)")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens (default 3)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--no-timing", action="store_true", help="skip the tokens/s measurement")
    p.add_argument("--no-matrix", action="store_true",
                   help="skip the engine matrix (only the tokens/s measurement)")
    p.add_argument("--timing-repeats", type=int, default=3)
    p.add_argument("--timing-tokens", type=int, default=128)
    p.add_argument("--kimi-width", action="store_true",
                   help="also serve the lifted Kimi-width models and their negative "
                        "controls (built there, 18 GB: vllm-kimi-eagle kimi-width), "
                        "both classes, compiled with CUDA graphs; with --no-matrix "
                        "--no-timing only them")
    p.add_argument("--kimi-width-drafts", default=",".join(KIMI_WIDTH_DRAFTS),
                   help="the lifted Kimi-width drafts to serve, with their controls "
                        "(default: %(default)s)")
    p.add_argument("--kimi-width-models", default=None,
                   help="where the Kimi-width models are or are built (kimi-width --models)")
    # For developers checking the orchestration on the CPU build: not a GPU check.
    p.add_argument("--enforce-eager", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dtype", default=None, help=argparse.SUPPRESS)
    p.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def write_quantized(models: str) -> None:
    """The quantized copies of the base draft the matrix serves (derived data, seconds)."""
    from vllm_kimi_eagle.fixtures.quantized import write_quantized_draft

    for folder, (scheme, block) in QUANTIZED.items():
        if not os.path.exists(os.path.join(models, folder, "model.safetensors")):
            write_quantized_draft(os.path.join(models, BASE), os.path.join(models, folder),
                                  scheme, block)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    problem = None if args.allow_cpu else cuda_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    import torch

    try:
        import flashinfer  # noqa: F401
    except ImportError:  # vLLM's sampler probes flashinfer at start-up unless told not to
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    if args.kimi_width and args.no_matrix and args.no_timing:
        return kimi_width(args, torch.cuda.device_count())
    from vllm_kimi_eagle.fixtures.cache import build_summary, ensure_tiny_models

    models = ensure_tiny_models(args.models)
    write_quantized(models)
    problem = None if args.allow_cpu else head_dims_problem(models)
    if problem:
        print(f"vllm-kimi-eagle gpu-check: {problem}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    wanted = [w for w in args.cases.split(",") if w] or [""]
    cases = [] if args.no_matrix else [c for c in matrix(gpus) if any(w in c.name for w in wanted)]
    version = vllm_compat.installed_vllm_version()
    device = torch.cuda.get_device_name() if gpus else "cpu"
    say(f"gpu-check: vLLM {version}, torch {torch.__version__}, {gpus} x {device}; models "
        f"{models} (content hash {build_summary(models).get('content_hash', '?')[:16]}); "
        f"{len(cases)} engines, {args.parallel} at a time; logs in {out}/logs")
    schedules = schedule_support(version)
    for runner, line in schedules.items():
        say(f"k schedules (num_speculative_tokens_per_batch_size), {runner}: {line}")
    started = time.perf_counter()
    results, facts = run_matrix(cases, args, models, out)
    default_runner = vllm_runners.default_gpu_runner(version)
    checks = [c for case in cases
              for c in case_checks(case, results[case.name], facts[case.name], results,
                                   default_runner)]
    rows = report_rows(cases, results, facts, checks)
    report = {"date": datetime.date.today().isoformat(), "vllm": str(version),
              "torch": torch.__version__, "gpu": device, "gpus": gpus, "models": models,
              "content_hash": build_summary(models).get("content_hash"),
              "default_runner_expected": default_runner, "k_schedules": schedules,
              "matrix_seconds": round(time.perf_counter() - started, 1), "rows": rows,
              "checks": [c.__dict__ for c in checks]}
    print(format_table(rows))
    if not args.no_timing:
        say("timing: no draft, the plugin and the in-tree class on live servers, "
            "interleaved rounds")
        try:
            report["timing"] = timing(args, models, out)
            print(report["timing"]["report"])
        except (BenchError, vllm_server.ServerError) as err:
            report["timing"] = {"error": str(err)}
            checks.append(Check("timing", "servers measured", False, str(err)[:300]))
            say(f"timing failed: {err}")
    path = os.path.join(out, "gpu-check.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    failed = [c for c in checks if not c.ok]
    print(f"\n{len(checks) - len(failed)}/{len(checks)} checks passed; wrote {path}")
    wide = kimi_width(args, gpus) if args.kimi_width else 0
    return 1 if failed or wide else 0


def kimi_width(args, gpus: int) -> int:
    """The Kimi-width case: ``kimi-width``'s engines on this GPU (tensor parallel 2 too
    with two GPUs), compiled with CUDA graphs, ``--parallel`` at a time."""
    from vllm_kimi_eagle.tools.kimi_width import cli as wide

    say("kimi-width: the draft classes at Kimi's width, compiled, with CUDA graphs")
    argv = ["--drafts", args.kimi_width_drafts, "--tensor-parallel", "1,2" if gpus >= 2 else "1",
            "--k", str(args.k), "--parallel", str(args.parallel),
            # the GPU shared by --parallel engines, each holding about 13 GB of weights
            "--gpu-memory-utilization", str(round(0.9 / args.parallel, 2)),
            "--out", os.path.join(args.out, "kimi-width")]
    if args.kimi_width_models:
        argv += ["--models", args.kimi_width_models]
    return wide.main(argv)


if __name__ == "__main__":
    sys.exit(main())
