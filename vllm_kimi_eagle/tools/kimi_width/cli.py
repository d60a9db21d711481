"""``vllm-kimi-eagle kimi-width``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.fixtures import controls as ctl
from vllm_kimi_eagle.fixtures import kimi_width as kw
from vllm_kimi_eagle.fixtures import lifted
from vllm_kimi_eagle.fixtures import streamed_safetensors as streamed
from vllm_kimi_eagle.tools.engines import engine_process
from vllm_kimi_eagle.tools.engines.vllm_server import DEFAULT_ENV, cpu_platform
from vllm_kimi_eagle.tools.figures.progress import say
from vllm_kimi_eagle.tools.kimi_width import __doc__ as DESCRIPTION
from vllm_kimi_eagle.tools.kimi_width import measure, verdicts

CASE_TIMEOUT_S = 3600
# Besides the target's and the largest draft's weights: vLLM, the KV cache space and the
# activations of a worker (measured: docs/measurements.md).
ENGINE_OVERHEAD_GIB = 4.0


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle kimi-width", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--construction", choices=("lifted", "torus"), default="lifted",
                   help="lifted (default): the trained tiny models lifted to the width, "
                        "with their negative controls; torus: the untrained models whose "
                        "every draft token is accepted (fixtures/kimi_width.py)")
    p.add_argument("--width", choices=tuple(lifted.WIDTHS), default="kimi",
                   help="lifted models: kimi (default; bfloat16, 18 GB on disk) or "
                        "small (float32, the suite's copy: minutes)")
    p.add_argument("--models", default=None,
                   help="the models' folder (default: under the tiny models' cache; built "
                        "there when missing)")
    p.add_argument("--drafts", default=None,
                   help="comma-separated drafts to serve (default: all of the construction's)")
    p.add_argument("--controls", default=",".join(ctl.CONTROL_NAMES),
                   help="lifted models: comma-separated negative controls to serve "
                        "(default: all; '' for none)")
    p.add_argument("--tensor-parallel", default="1,2",
                   help="comma-separated tensor-parallel sizes (default 1,2)")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens (default 3)")
    p.add_argument("--prompts", type=int, default=None,
                   help="prompts (default 16 lifted, 8 torus)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="greedy tokens per prompt (default 64 lifted, 48 torus)")
    p.add_argument("--compiled", action="store_true",
                   help="torch.compile the engines (default on a GPU; on the CPU build "
                        "eager, as compiling adds minutes per engine and nothing at width)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3,
                   help="per engine, on a GPU (default 0.3)")
    p.add_argument("--parallel", type=int, default=1,
                   help="engines at once (default 1; on one CPU machine keep 1: the page "
                        "cache is then dropped before each engine, so that no class loads "
                        "from memory what another read from disk)")
    p.add_argument("--out", default="out/kimi-width")
    return p.parse_args(argv)


def available_gib() -> float | None:
    """This machine's MemAvailable, GiB; None without /proc."""
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) for line in f}
    except OSError:
        return None
    return info.get("MemAvailable", 0) / 2**20


def memory_problem(models: str, drafts: tuple[str, ...]) -> str | None:
    """Why this machine cannot hold the target and the largest draft, or None."""
    sizes = kw.folder_bytes(kw.KIMI, tuple(kw.draft_named(d) for d in drafts))
    need = (sizes["target"] + max((sizes[d] for d in drafts), default=0)) / 2**30 \
        + ENGINE_OVERHEAD_GIB
    available = available_gib()
    if available is not None and available < need:
        return (f"serving the Kimi-width target with its largest draft takes about "
                f"{need:.1f} GiB of memory; this machine has {available:.1f} GiB available "
                "(MemAvailable). Stop other processes, or serve fewer drafts (--drafts "
                "draft-modelopt-32k needs the least)")
    return None


def drop_page_cache() -> bool:
    """Start each engine with the page cache empty, so that neither class loads from memory
    what the other read from disk; False where this process may not (not root)."""
    try:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def engine_env(case: verdicts.Case, cpu: bool) -> dict:
    env = {**os.environ, **case.env()}
    if cpu:
        for key, value in DEFAULT_ENV.items():
            env.setdefault(key, value)
        cpus = sorted(os.sched_getaffinity(0))
        if case.tensor_parallel > 1:  # one core per rank (the default refuses one NUMA node)
            per = max(1, len(cpus) // case.tensor_parallel)
            ranks = [cpus[i * per:(i + 1) * per] for i in range(case.tensor_parallel)]
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
                str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in ranks)
    return env


def plugin_cost(models: str, drafts: tuple[str, ...], out: str) -> dict:
    spec = {"target": os.path.join(models, "target"),
            "drafts": [os.path.join(models, d) for d in drafts]}
    return engine_process.run(
        [sys.executable, "-m", "vllm_kimi_eagle.tools.kimi_width.plugin_cost", json.dumps(spec)],
        os.path.join(out, "logs", "plugin_cost.log"), {**os.environ, **DEFAULT_ENV}, 900)


def run_cases(cases, args, models: str, out: str, cpu: bool, prompts) -> tuple[dict, bool]:
    """Every case's result (with its log's facts), one engine at a time with the page
    cache dropped before each where possible, or ``args.parallel`` at a time (a GPU); an
    engine that tripped on its neighbours' memory runs again alone. Also whether every
    engine started with the page cache dropped."""
    from concurrent.futures import ThreadPoolExecutor

    from vllm_kimi_eagle.tools.engines.engine_case import log_facts, tripped_on_neighbours

    results, dropped = {}, []
    started = time.perf_counter()

    def one(case) -> None:
        spec = {"target": os.path.join(models, "target"),
                "speculative_config": case.speculative_config(models, args.k),
                "prompt_ids": prompts, "max_tokens": args.max_tokens, "warm_up": 8,
                "max_model_len": 256, "batch_to_length": True,
                "tensor_parallel": case.tensor_parallel, "dtype": args.dtype,
                "enforce_eager": cpu and not args.compiled,
                "gpu_memory_utilization": None if cpu else args.gpu_memory_utilization}
        if args.parallel == 1:
            dropped.append(drop_page_cache())
        log = os.path.join(out, "logs", case.name.replace("/", "_") + ".log")
        result = measure.run_case(spec, engine_env(case, cpu), log, CASE_TIMEOUT_S)
        with open(log, errors="replace") as f:
            result["log_facts"] = log_facts(f.read(), started="error" not in result)
        results[case.name] = result
        status = ("error: " + result["error"].splitlines()[-1][:160]) if "error" in result \
            else (f"acceptance {result.get('acceptance_length')}, draft load "
                  f"{result.get('draft_load_s', '-')} s, worker peak "
                  f"{result['memory'].get('worker_anon_gib')} GiB")
        done = len(results)
        eta = (time.perf_counter() - started) / done * (len(cases) - done)
        say(f"[{done}/{len(cases)}] {case.name}: {status} (ETA {eta / 60:.0f} min)")

    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(one, cases))
    for case in [c for c in cases if tripped_on_neighbours(results[c.name])]:
        say(f"{case.name}: vLLM's memory profiling counted another engine's memory; "
            "starting it again alone")
        del results[case.name]
        one(case)
    return results, bool(dropped) and all(dropped)


def device() -> str:
    """The GPU, or the CPU model and its core count."""
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}"
    try:
        with open("/proc/cpuinfo") as f:
            name = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        name = "CPU"
    return f"{name}, {len(os.sched_getaffinity(0))} cores"


def write_report(report: dict, out: str) -> str:
    lines = [f"# Kimi-width run, {report['date']}", "",
             f"vLLM {report['vllm']} ({report['device']}), models {report['models']} "
             f"({report.get('construction', 'torus')}) "
             f"(recipe {report['recipe_version']}), k={report['k']}, "
             f"{report['prompts']} prompts x {report['max_tokens']} tokens, "
             f"{'compiled' if report['compiled'] else 'eager'}, page cache "
             f"{'dropped before each engine' if report['cold_cache'] else 'as it was'}.", "",
             report["table"], ""]
    if report["plugin_cost"] is not None:
        lines += ["## The plugin before any weight loads", "",
                  "```", json.dumps(report["plugin_cost"], indent=2), "```", ""]
    lines += ["## Checks", ""]
    lines += [f"- {'ok' if c['ok'] else 'FAILED'} {c['case']}: {c['check']} {c['detail']}"
              for c in report["checks"]]
    path = os.path.join(out, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    return path


def finish(report: dict, checks, out: str) -> int:
    """Write the report, print its table and failures; the exit code."""
    path = write_report(report, out)
    print(report["table"])
    failed = [c for c in checks if not c.ok]
    for c in failed:
        print(f"FAILED {c.case}: {c.check} {c.detail}")
    print(f"\n{len(checks) - len(failed)}/{len(checks)} checks passed; wrote {path}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.construction == "lifted":
        return main_lifted(args)
    args.dtype = "bfloat16"
    args.prompts = args.prompts or 8
    args.max_tokens = args.max_tokens or 48
    try:
        drafts = tuple(kw.draft_named(d).name
                       for d in (args.drafts or ",".join(kw.DRAFT_NAMES)).split(",") if d)
        sizes = tuple(int(n) for n in args.tensor_parallel.split(",") if n)
    except ValueError as err:
        print(f"vllm-kimi-eagle kimi-width: {err}", file=sys.stderr)
        return 2
    models = args.models or kw.default_folder()
    cpu = cpu_platform()
    problem = memory_problem(models, drafts) if cpu else None  # a GPU holds the weights
    if problem:
        print(f"vllm-kimi-eagle kimi-width: {problem}", file=sys.stderr)
        return 2
    wanted = tuple(kw.draft_named(d) for d in drafts)
    if not kw.is_built(models, wanted):
        say(f"building the Kimi-width models into {models} (once; minutes)")
        try:
            kw.write_models(models, kw.KIMI, wanted, progress=lambda l: say(f"  {l}"))
        except OSError as err:
            print(f"vllm-kimi-eagle kimi-width: {err}", file=sys.stderr)
            return 2
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    prompts = kw.prompts(kw.KIMI, args.prompts)
    cases = verdicts.matrix(drafts, sizes)
    say(f"kimi-width: {len(cases)} engines one at a time, logs in {out}/logs")
    cost = plugin_cost(models, drafts, out)
    say(f"the plugin before any weight loads: {json.dumps(cost)[:400]}")
    results, cold = run_cases(cases, args, models, out, cpu, prompts)
    checks = verdicts.all_checks(cases, results, prompts, kw.KIMI, gpu=not cpu)
    report = {"date": datetime.date.today().isoformat(), "vllm": str(vllm_compat.installed_vllm_version()),
              "device": device(), "models": models,
              "recipe_version": kw.RECIPE_VERSION, "k": args.k, "prompts": args.prompts,
              "max_tokens": args.max_tokens, "compiled": args.compiled or not cpu,
              "parallel": args.parallel,
              "cold_cache": cold, "plugin_cost": cost,
              "results": {name: {k: v for k, v in r.items() if k != "token_ids"}
                          for name, r in results.items()},
              "table": verdicts.table(cases, results),
              "checks": [c.__dict__ for c in checks]}
    return finish(report, checks, out)


def lifted_prompts(count: int, tiny: str) -> list[list[int]]:
    """Token ids of held-out prompts in the tiny tokenizer: the suite's engines' first."""
    from transformers import PreTrainedTokenizerFast

    from vllm_kimi_eagle.fixtures import corpus, offline

    tokenizer = PreTrainedTokenizerFast.from_pretrained(os.path.join(tiny, "target"))
    return [tokenizer(corpus.render(p), add_special_tokens=False)["input_ids"]
            for p in corpus.demo_prompts(count, seed=offline.SUITE_SEED)]


def lifted_memory_problem(lift: lifted.Lift, tiny: str) -> str | None:
    """Why this machine cannot hold the lifted target with its largest draft, or None."""
    need = lifted.folder_bytes(lift, tiny, lifted.DRAFTS[:1]) / 2**30 + ENGINE_OVERHEAD_GIB
    available = available_gib()
    if available is not None and available < need:
        return (f"serving the lifted target with its largest draft takes about {need:.1f} "
                f"GiB of memory; this machine has {available:.1f} GiB available "
                "(MemAvailable). Stop other processes, or use --width small")
    return None


def main_lifted(args) -> int:
    """The lifted models and their controls (tools/kimi_width/lifted_verdicts.py)."""
    import torch

    from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models
    from vllm_kimi_eagle.tools.kimi_width import lifted_verdicts as lv
    from vllm_kimi_eagle.tools.kimi_width.replay import reference_acceptance

    lift = lifted.WIDTHS[args.width]
    args.dtype = "bfloat16" if args.width == "kimi" else "float32"
    args.prompts = args.prompts or 16
    args.max_tokens = args.max_tokens or 64
    try:
        drafts = lv.drafts_named(args.drafts or ",".join(lifted.DRAFT_NAMES))
        chosen = tuple(ctl.control_named(c).name for c in args.controls.split(",") if c)
        sizes = tuple(int(n) for n in args.tensor_parallel.split(",") if n)
    except ValueError as err:
        print(f"vllm-kimi-eagle kimi-width: {err}", file=sys.stderr)
        return 2
    cpu = cpu_platform()
    tiny = ensure_tiny_models()
    models = args.models or lifted.default_folder(tiny, args.width)
    problem = lifted_memory_problem(lift, tiny) if cpu else None
    if problem:
        print(f"vllm-kimi-eagle kimi-width: {problem}", file=sys.stderr)
        return 2
    if not lifted.is_built(models, tiny, lift):
        need = lifted.folder_bytes(lift, tiny)
        problem = streamed.disk_problem(models, need, "the lifted models",
                                        "free some space or write them elsewhere (--models)")
        if problem:
            print(f"vllm-kimi-eagle kimi-width: {problem}", file=sys.stderr)
            return 2
        say(f"lifting the tiny models ({tiny}) to {args.width} width into {models} "
            f"(once; about {need / 1e9:.1f} GB)")
        dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
        ctl.write_models(tiny, models, lift, dtype, progress=lambda l: say(f"  {l}"))
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    prompts = lifted_prompts(args.prompts, tiny)
    cases = lv.matrix(drafts, sizes, chosen)
    say(f"kimi-width (lifted, {args.width}): {len(cases)} engines one at a time, logs in "
        f"{out}/logs")
    results, cold = run_cases(cases, args, models, out, cpu, prompts)
    say("replaying each engine's tokens with the reference models")
    for name, value in reference_acceptance(cases, results, prompts, args.k, tiny).items():
        results[name]["reference_acceptance"] = value
    checks = lv.all_checks(cases, results, args.dtype, gpu=not cpu)
    report = {"date": datetime.date.today().isoformat(),
              "vllm": str(vllm_compat.installed_vllm_version()), "device": device(),
              "models": models, "construction": f"lifted ({args.width}, {args.dtype})",
              "recipe_version": lifted.RECIPE_VERSION, "k": args.k, "prompts": args.prompts,
              "max_tokens": args.max_tokens, "compiled": args.compiled or not cpu,
              "parallel": args.parallel, "cold_cache": cold, "plugin_cost": None,
              "results": {name: {k: v for k, v in r.items() if k != "token_ids"}
                          for name, r in results.items()},
              "table": lv.table(cases, results), "checks": [c.__dict__ for c in checks]}
    return finish(report, checks, out)


if __name__ == "__main__":
    sys.exit(main())
