"""Print what a k schedule costs beyond the k it drafts, on the tiny Kimi-cost target.

    .venv/bin/python benchmarks/schedule_cost.py [--concurrency 16,64] [--rounds 5]

A schedule window drafts the k its batch size is given, but its server is started with the
schedule's largest k as ``num_speculative_tokens``; bench-e2e --schedule compares it with a
server of that fixed k and with no speculation. This serves, side by side, in interleaved
rounds (bench-e2e's measurement: each server measured alone, the others frozen):

- ``none``: no speculation;
- ``k0-static1`` / ``k0-static2``: a schedule of k=0 at every batch size, started with
  ``num_speculative_tokens`` 1 and 2 (the same work: two instances of one configuration,
  which shows how far two servers differ by themselves);
- ``fixed-k1``: k=1, no schedule; ``k1-static2``: a schedule of k=1 everywhere, started
  with 2;
- ``mixed``: k=2 up to batch 9, 1 up to 42, 0 above (a schedule bench-e2e derived here).

and prints each one's tokens/s over no speculation, and the pairs that isolate the
mechanism, per round. A figure, not a test (docs/measurements.md).
"""

import argparse
import json
import os
import statistics
import sys
import types
from contextlib import ExitStack

from vllm_kimi_eagle.fixtures import kimi_cost
from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models
from vllm_kimi_eagle.tools.bench_e2e.grid import NONE, SCHEDULE, balanced_order
from vllm_kimi_eagle.tools.bench_e2e.measure import LiveServers

MIXED = [[1, 9, 2], [10, 42, 1], [43, 1024, 0]]
# (name, num_speculative_tokens, schedule); None: no speculation
SERVERS = (("none", None, None), ("k0-static1", 1, [[1, 1024, 0]]),
           ("k0-static2", 2, [[1, 1024, 0]]), ("fixed-k1", 1, None),
           ("k1-static2", 2, [[1, 1024, 1]]), ("mixed", 2, MIXED))
PAIRS = (("k0-static2", "k0-static1"), ("k1-static2", "fixed-k1"), ("mixed", "fixed-k1"),
         ("mixed", "none"))


def spec(draft: str, static: int | None, schedule) -> dict | None:
    if static is None:
        return None
    config = {"method": "eagle3", "model": draft, "num_speculative_tokens": static}
    return {**config, "num_speculative_tokens_per_batch_size": schedule} if schedule else config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="16,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--models", help="tiny models folder (default: the cache)")
    parser.add_argument("--out", default="out/schedule-cost")
    args = parser.parse_args()
    from tqdm import tqdm

    folder = ensure_tiny_models(args.models)
    draft = os.path.join(folder, kimi_cost.DRAFTS[0][0])
    concurrency = [int(c) for c in args.concurrency.split(",")]
    os.makedirs(args.out, exist_ok=True)
    bench = types.SimpleNamespace(target=os.path.join(folder, kimi_cost.NAME), draft=draft,
                                  server_args=[], target_is_tiny=True, startup_timeout=900)
    grid = {"prompts": args.prompts, "concurrency": concurrency, "max_tokens": args.max_tokens}
    names = [name for name, _, _ in SERVERS]
    progress = tqdm(total=args.rounds * len(concurrency) * len(names), file=sys.stderr)
    live = LiveServers(bench, grid, args.out, progress)
    tok_s: dict[tuple[int, str], list[float]] = {}
    with ExitStack() as stack:
        for name, static, schedule in SERVERS:
            live.start(stack, name, NONE if static is None else SCHEDULE,
                       spec(draft, static, schedule))
        for round_ in range(args.rounds):
            for i, c in enumerate(concurrency):
                for name in balanced_order(names, round_ * len(concurrency) + i):
                    w = live.window(name, NONE if name == "none" else SCHEDULE, c, None)
                    tok_s.setdefault((c, name), []).append(w["tokens_per_s"])
                    print(json.dumps({"round": round_, "concurrency": c, "name": name,
                                      "tokens_per_s": round(w["tokens_per_s"], 3),
                                      "draft_k_per_step": w["k_per_step"]}), flush=True)
    progress.close()
    for c in concurrency:
        for a, b in ((name, "none") for name in names[1:]):
            ratios = [x / y for x, y in zip(tok_s[(c, a)], tok_s[(c, b)])]
            print(f"c={c} {a:>10} / {b:<8} median {statistics.median(ratios):.3f} "
                  f"[{min(ratios):.3f}-{max(ratios):.3f}]")
        for a, b in PAIRS:
            ratios = [round(x / y, 3) for x, y in zip(tok_s[(c, a)], tok_s[(c, b)])]
            print(f"c={c} {a:>10} / {b:<10} median {statistics.median(ratios):.3f}, "
                  f"per round {ratios}")


if __name__ == "__main__":
    main()
