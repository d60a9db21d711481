"""How long register() takes, each run in a fresh interpreter that has imported what a vLLM
process of that kind imports before vLLM loads its plugins.

    .venv/bin/python benchmarks/registration_time.py [--as-version 0.34.0] [--runs 5]
        [--imported vllm|api_server|engine_core] [--against FOLDER]

``--as-version``: the vLLM version register() is told is installed (a minor the plugin was
not checked on, say); ``--against``: another checkout of the plugin (``git worktree add``),
timed in the same runs, alternating, with the ratio of the medians. A figure, not a test:
register() runs in every vLLM process, servers without a draft included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMPORTED = {"vllm": "vllm", "api_server": "vllm.entrypoints.openai.api_server",
            "engine_core": "vllm.v1.engine.core"}
CHILD = """
import importlib, json, sys, time
importlib.import_module({module!r})
import vllm_kimi_eagle
from vllm_kimi_eagle.compat import vllm_compat
if {version!r}:
    vllm_compat.installed_vllm_version_text = lambda: {version!r}
before = set(sys.modules)
started = time.perf_counter()
vllm_kimi_eagle.register()
seconds = time.perf_counter() - started
print(json.dumps({{"seconds": seconds, "tree": vllm_kimi_eagle.__file__,
                   "model_modules": sorted(m for m in set(sys.modules) - before
                                           if m.startswith("vllm.model_executor.models"))}}))
"""


def one_run(tree: str, module: str, version: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": tree, "VLLM_PLUGINS": ""}
    proc = subprocess.run([sys.executable, "-c", CHILD.format(module=module, version=version)],
                          env=env, cwd=tree, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"register() run in {tree} failed:\n{proc.stderr[-3000:]}")
    found = json.loads(lines[-1])
    if not found["tree"].startswith(tree + os.sep):
        raise SystemExit(f"the run meant for {tree} imported the plugin from {found['tree']}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--as-version", default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--imported", choices=sorted(IMPORTED), default="vllm")
    parser.add_argument("--against", default=None)
    args = parser.parse_args()
    trees = {"this tree": REPO}
    if args.against:
        trees = {"against": os.path.abspath(args.against), **trees}
    seconds = {name: [] for name in trees}
    modules = {}
    for run in range(args.runs):
        order = list(trees.items()) if run % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:
            found = one_run(tree, IMPORTED[args.imported], args.as_version)
            seconds[name].append(found["seconds"])
            modules[name] = len(found["model_modules"])
            print(f"run {run + 1} {name}: {found['seconds'] * 1000:.1f} ms "
                  f"({modules[name]} vLLM model modules imported)", flush=True)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    told = args.as_version or "the installed version"
    for name, values in seconds.items():
        print(f"register() as vLLM {told}, {args.imported} imported, {name} ({trees[name]}): "
              f"median {medians[name] * 1000:.1f} ms ({min(values) * 1000:.1f}-"
              f"{max(values) * 1000:.1f}), {modules[name]} model modules imported")
    if args.against:
        print(f"this tree / against: {medians['this tree'] / medians['against']:.3f}")


if __name__ == "__main__":
    main()
