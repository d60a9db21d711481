"""How many mutants of the runtime's decision modules their unit tests kill: mutmut
(configured in setup.cfg, [mutmut]) over layer_ids, draft_config, draft_spec, quantization,
settings, shortcut_policy, checkpoint and the paired verdict (tools/figures/paired), then
one score per module.

A mutant is a small change (a comparison flipped, and/or swapped, a constant or a string
changed, an argument dropped, a return replaced by None); it is killed when a test fails.
score = killed / all mutants: a mutant no test reaches, or that survives, counts against
(equivalent mutants too: they are listed with ``mutmut show NAME``).

Run from the repository root: ``make mutation`` (installs mutmut into the venv first).
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import time

GOAL = 0.8
KILLED = ("killed", "timeout")


def main() -> int:
    mutmut = os.path.join(os.path.dirname(sys.executable), "mutmut")
    shutil.rmtree("mutants", ignore_errors=True)
    env = {**os.environ, "HYPOTHESIS_PROFILE": "mutation"}
    started = time.perf_counter()
    run = subprocess.run([mutmut, "run", "--max-children", str(os.cpu_count() or 1)],
                         env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if run.returncode != 0:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
        return run.returncode
    listing = subprocess.run([mutmut, "results", "--all", "true"], env=env,
                             capture_output=True, text=True, check=True).stdout
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in listing.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if "__mutmut_" not in name:
            continue
        module = name.split(".x")[0]  # vllm_kimi_eagle.draft.layer_ids.x_resolve... -> module
        counts[module][status] += 1
    print(f"mutmut over {len(counts)} modules in {seconds:.0f} s "
          f"({os.cpu_count()} workers); score = killed / all mutants")
    print(f"{'module':44} {'mutants':>7} {'killed':>6} {'survived':>8} {'no test':>7} "
          f"{'score':>6}")
    low = []
    for module, found in sorted(counts.items()):
        total = sum(found.values())
        killed = sum(found[s] for s in KILLED)
        score = killed / total
        low += [module] if score < GOAL else []
        print(f"{module:44} {total:7d} {killed:6d} {found['survived']:8d} "
              f"{found['no tests']:7d} {score:6.2f}")
    print(f"below {GOAL}: {', '.join(low) or 'none'}; survivors: `mutmut results`, "
          "one diff: `mutmut show NAME`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
