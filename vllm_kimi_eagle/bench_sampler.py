"""``vllm-kimi-eagle bench-sampler``: the greedy shortcut against the plain path.

Times, side by side in one run, at Kimi's real sizes (hidden 7168, target vocabulary
163840, draft vocabulary 163840 or 32000 with d2t), per draft step:

- ``sampling``: from draft logits to the target id (plain: full target-vocabulary
  ``-inf`` tensor, scatter through d2t, argmax; shortcut: ``greedy_sampler.shard_top1``);
- ``head``: LM head matmul plus sampling.

Reports the median time of each, the ratio plain/shortcut, and the memory each path
allocates beyond its inputs (peak on a GPU; bytes allocated during the call on a CPU,
from the PyTorch profiler). Checks that both paths pick the same tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from vllm_kimi_eagle.greedy_sampler import d2t_is_increasing, plain_top1, shard_top1

KIMI = {"hidden": 7168, "target_vocab": 163840, "draft_vocabs": (163840, 32000)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fns: dict, repeats: int, device: torch.device) -> dict:
    """Median wall time of each function, calls interleaved to share the noise."""
    times: dict = {name: [] for name in fns}
    for name, fn in fns.items():  # warm-up
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(t) for name, t in times.items()}


def _extra_mb(fn, device: torch.device) -> float:
    """Memory a call needs beyond its inputs, in MiB (see module doc)."""
    if device.type == "cuda":
        _sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        _sync(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    import os

    from torch.profiler import ProfilerActivity, profile

    saved = os.dup(2)  # the profiler's native start/stop lines go to stderr
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                fn()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    allocated = sum(max(e.self_cpu_memory_usage, 0) for e in prof.key_averages())
    return allocated / 2**20


def bench(hidden: int, target_vocab: int, draft_vocabs, batches, repeats: int,
          device: torch.device, dtype: torch.dtype, seed: int = 0):
    """Yield one dict per (draft vocab, batch, part)."""
    g = torch.Generator().manual_seed(seed)
    for draft_vocab in draft_vocabs:
        weight = (torch.randn(draft_vocab, hidden, generator=g) * hidden**-0.5).to(device, dtype)
        d2t = None
        if draft_vocab != target_vocab:
            kept = torch.randperm(target_vocab, generator=g)[:draft_vocab].sort().values
            d2t = (kept - torch.arange(draft_vocab)).to(device)
        increasing = d2t_is_increasing(d2t)

        def shortcut(logits):
            return shard_top1(logits, 0, draft_vocab, d2t, increasing, need_values=False)[1]

        for batch in batches:
            h = torch.randn(batch, hidden, generator=g).to(device, dtype)
            logits = F.linear(h, weight)
            paths = {
                "sampling": {
                    "plain": lambda: plain_top1(logits, d2t, target_vocab),
                    "shortcut": lambda: shortcut(logits),
                },
                "head": {
                    "plain": lambda: plain_top1(F.linear(h, weight), d2t, target_vocab),
                    "shortcut": lambda: shortcut(F.linear(h, weight)),
                },
            }
            for part, fns in paths.items():
                same = torch.equal(fns["plain"](), fns["shortcut"]())
                ms = _median_ms(fns, repeats, device)
                yield {
                    "draft_vocab": draft_vocab,
                    "target_vocab": target_vocab,
                    "batch": batch,
                    "part": part,
                    "plain_ms": round(ms["plain"], 4),
                    "shortcut_ms": round(ms["shortcut"], 4),
                    "ratio": round(ms["plain"] / ms["shortcut"], 2),
                    "plain_extra_mb": round(_extra_mb(fns["plain"], device), 2),
                    "shortcut_extra_mb": round(_extra_mb(fns["shortcut"], device), 2),
                    "same_tokens": same,
                    "device": str(device),
                    "dtype": str(dtype).removeprefix("torch."),
                }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-kimi-eagle bench-sampler", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=KIMI["hidden"])
    parser.add_argument("--target-vocab", type=int, default=KIMI["target_vocab"])
    parser.add_argument("--draft-vocabs", default=",".join(map(str, KIMI["draft_vocabs"])))
    parser.add_argument("--batches", default="1,4,16,64")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None,
                        help="default: bfloat16 on a GPU, float32 on a CPU")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    rows = bench(args.hidden, args.target_vocab,
                 [int(v) for v in args.draft_vocabs.split(",")],
                 [int(b) for b in args.batches.split(",")], args.repeats, device, dtype)
    if not args.json:
        print(f"{'draft':>7} {'target':>7} {'batch':>5} {'part':>8} {'plain ms':>9} "
              f"{'short ms':>9} {'ratio':>6} {'plain MiB':>9} {'short MiB':>9} same")
    mismatches = 0
    for row in rows:
        mismatches += not row["same_tokens"]
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{row['draft_vocab']:>7} {row['target_vocab']:>7} {row['batch']:>5} "
                  f"{row['part']:>8} {row['plain_ms']:>9.3f} {row['shortcut_ms']:>9.3f} "
                  f"{row['ratio']:>6.2f} {row['plain_extra_mb']:>9.2f} "
                  f"{row['shortcut_extra_mb']:>9.2f} {row['same_tokens']}", flush=True)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
