"""``vllm-kimi-eagle bench-sampler``: greedy draft tokens, three paths side by side.

At Kimi's real sizes (hidden 7168, target vocabulary 163840, draft vocabulary 163840 or
32000 with d2t), per draft step, in one run with the calls interleaved:

- ``plain``: vLLM's default (``use_local_argmax_reduction`` off): vLLM's in-tree MLA
  draft's ``compute_logits`` (logits over the draft vocabulary, scattered into a
  target-vocabulary ``-inf`` tensor through d2t), then ``argmax``;
- ``upstream_local``: vLLM's own local argmax, ``LocalArgmaxMixin.get_top_tokens``
  (what vLLM's in-tree class runs with the flag on), imported from the installed vLLM;
  skipped, with the reason, where the release has none;
- ``shortcut``: this plugin's ``Eagle3DeepseekV2ForCausalLM.get_top_tokens``.

All three are the real functions, called on a real vLLM ``ParallelLMHead`` and
``LogitsProcessor`` (tensor parallel size 1). Two parts are timed:

- ``head``: the whole call, LM-head matmul included (what a draft step pays);
- ``sampling``: the same calls with the LM head's matmul replaced by the precomputed
  logits, identically for all three paths, so that only the token choice is timed.

Times are wall-clock on a GPU (synchronised). On a CPU they are the calling thread's
CPU time with one PyTorch thread (``--threads``): a shared machine's other processes then
barely move them, where wall-clock medians swing by several times. Reports median times,
the ratios plain/shortcut (``ratio``) and upstream_local/shortcut
(``ratio_vs_upstream_local``), and the memory each path allocates beyond its inputs
(peak on a GPU; bytes allocated during the call on a CPU, from the PyTorch profiler).
Exits non-zero if the paths ever pick different tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import sys
import time
from types import SimpleNamespace

import torch
from torch import nn

KIMI = {"hidden": 7168, "target_vocab": 163840, "draft_vocabs": (163840, 32000)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _clock(device: torch.device):
    """Wall clock on a GPU; the calling thread's CPU time on a CPU (see module doc)."""
    return time.perf_counter if device.type == "cuda" else time.thread_time


def _median_ms(fns: dict, repeats: int, device: torch.device, inputs: torch.Tensor) -> dict:
    """Median time of each function, calls interleaved to share the noise.

    Every call starts from the same cache state: its input is read (untimed) just
    before, as a draft step's logits are hot when they are sampled. Without that the
    plain path, which writes a batch x target-vocabulary tensor, would evict the input
    of whichever call follows it. The order also cycles through every permutation.
    """
    clock = _clock(device)
    times: dict = {name: [] for name in fns}
    orders = list(itertools.permutations(fns))
    for fn in fns.values():  # warm-up
        fn()
    for repeat in range(repeats):
        for name in orders[repeat % len(orders)]:
            fn = fns[name]
            inputs.sum()
            _sync(device)
            start = clock()
            fn()
            _sync(device)
            times[name].append((clock() - start) * 1000)
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


@contextlib.contextmanager
def single_rank_vllm():
    """vLLM's distributed state for one rank (gloo), as the layers need it."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import (
        destroy_distributed_environment,
        destroy_model_parallel,
        init_distributed_environment,
        initialize_model_parallel,
    )

    from vllm_kimi_eagle.tools.engines.vllm_server import free_port

    port = free_port()
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{port}",
        )
        initialize_model_parallel(1, 1)
        try:
            yield
        finally:
            destroy_model_parallel()
            destroy_distributed_environment()


class _PrecomputedLogits:
    """Quant method whose 'matmul' returns its input: the sampling part's logits."""

    def apply(self, layer, x, bias=None):
        return x


class DraftHead(nn.Module):
    """The draft attributes the three paths read: lm_head, logits_processor, d2t."""

    def __init__(self, draft_vocab: int, hidden: int | None, d2t, target_vocab: int,
                 device: torch.device, dtype: torch.dtype, generator=None, weight=None):
        """``hidden`` None: the sampling part's head, fed precomputed logits; ``weight``
        None: random rows from ``generator``."""
        super().__init__()
        from vllm.model_executor.layers.logits_processor import LogitsProcessor
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

        from vllm_kimi_eagle.serving import top_tokens

        self.lm_head = ParallelLMHead(draft_vocab, hidden or 1, params_dtype=dtype)
        if hidden:  # rows past draft_vocab are the head's padding and stay zero
            if weight is None:
                weight = torch.randn(draft_vocab, hidden, generator=generator) * hidden**-0.5
            self.lm_head.weight.data[:draft_vocab].copy_(weight)
            del weight
        self.lm_head.to(device)
        self.lm_head.quant_method.process_weights_after_loading(self.lm_head)
        if not hidden:
            self.lm_head.quant_method = _PrecomputedLogits()
        self.logits_processor = LogitsProcessor(draft_vocab)
        self.draft_id_to_target_id = d2t
        self.d2t_increasing = top_tokens.d2t_is_increasing(d2t)
        self.config = SimpleNamespace(vocab_size=target_vocab, draft_vocab_size=draft_vocab)
        self.spec = SimpleNamespace(vocab_size=target_vocab)


def upstream_classes() -> tuple[type | None, type | None, str]:
    """(vLLM's in-tree MLA draft class, LocalArgmaxMixin, why one is missing)."""
    from vllm_kimi_eagle.compat import vllm_compat

    mixin = vllm_compat.local_argmax_mixin()
    try:
        from vllm.model_executor.models.deepseek_eagle3 import Eagle3DeepseekV2ForCausalLM
    except ImportError as err:
        return None, mixin, f"this vLLM has no in-tree MLA draft ({err})"
    if mixin is None:
        return Eagle3DeepseekV2ForCausalLM, None, "this vLLM has no LocalArgmaxMixin"
    return Eagle3DeepseekV2ForCausalLM, mixin, ""


def paths(head: DraftHead) -> dict:
    """The three token choices on one DraftHead, hidden states -> target ids."""
    from vllm_kimi_eagle.serving.draft_model import Eagle3DeepseekV2ForCausalLM as Ours

    upstream, mixin, _ = upstream_classes()
    plain_logits = upstream.compute_logits if upstream else Ours.compute_logits
    chosen = {
        "plain": lambda h: plain_logits(head, h).argmax(dim=-1),
        "shortcut": lambda h: Ours.get_top_tokens(head, h),
    }
    if mixin is not None:
        chosen["upstream_local"] = lambda h: mixin.get_top_tokens(head, h)
    return chosen


def bench(hidden: int, target_vocab: int, draft_vocabs, batches, repeats: int,
          device: torch.device, dtype: torch.dtype, seed: int = 0):
    """Yield one dict per (draft vocab, batch, part)."""
    g = torch.Generator().manual_seed(seed)
    _, _, missing = upstream_classes()
    for draft_vocab in draft_vocabs:
        d2t = None
        if draft_vocab != target_vocab:
            kept = torch.randperm(target_vocab, generator=g)[:draft_vocab].sort().values
            d2t = (kept - torch.arange(draft_vocab)).to(device)
        heads = {
            "head": DraftHead(draft_vocab, hidden, d2t, target_vocab, device, dtype, g),
            "sampling": DraftHead(draft_vocab, None, d2t, target_vocab, device, dtype),
        }
        for batch in batches:
            h = torch.randn(batch, hidden, generator=g).to(device, dtype)
            real = heads["head"].lm_head
            # Padded to the head's width, as the real matmul returns them.
            logits = real.quant_method.apply(real, h)
            for part, head in heads.items():
                x = h if part == "head" else logits
                fns = {name: (lambda f=f, x=x: f(x)) for name, f in paths(head).items()}
                tokens = {name: fn() for name, fn in fns.items()}
                same = all(torch.equal(tokens["plain"], t) for t in tokens.values())
                ms = _median_ms(fns, repeats, device, x)
                extra = {name: round(_extra_mb(fn, device), 2) for name, fn in fns.items()}
                up = ms.get("upstream_local")
                yield {
                    "draft_vocab": draft_vocab,
                    "target_vocab": target_vocab,
                    "batch": batch,
                    "part": part,
                    "plain_ms": round(ms["plain"], 4),
                    "shortcut_ms": round(ms["shortcut"], 4),
                    "ratio": round(ms["plain"] / ms["shortcut"], 2),
                    "upstream_local_ms": round(up, 4) if up is not None else None,
                    "ratio_vs_upstream_local": (
                        round(up / ms["shortcut"], 2) if up is not None else None),
                    "upstream_local_skipped": missing or None,
                    "plain_extra_mb": extra["plain"],
                    "shortcut_extra_mb": extra["shortcut"],
                    "upstream_local_extra_mb": extra.get("upstream_local"),
                    "same_tokens": same,
                    "device": str(device),
                    "clock": "wall" if device.type == "cuda" else "thread_cpu",
                    "dtype": str(dtype).removeprefix("torch."),
                }


def _fmt(value, spec: str) -> str:
    return format(value, spec) if value is not None else "-".rjust(int(spec.split(".")[0]))


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="vllm-kimi-eagle bench-sampler", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=KIMI["hidden"])
    parser.add_argument("--target-vocab", type=int, default=KIMI["target_vocab"])
    parser.add_argument("--draft-vocabs", default=",".join(map(str, KIMI["draft_vocabs"])))
    parser.add_argument("--batches", default="1,4,16,64")
    parser.add_argument("--repeats", type=int, default=18)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None,
                        help="default: bfloat16 on a GPU, float32 on a CPU")
    parser.add_argument("--threads", type=int, default=1,
                        help="PyTorch threads on a CPU (default 1: per-thread CPU time is "
                             "then the whole cost)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    mismatches = 0
    with single_rank_vllm():
        _, _, missing = upstream_classes()
        if missing and not args.json:
            print(f"vLLM's own local-argmax path skipped: {missing}")
        if not args.json:
            clock = "wall clock" if device.type == "cuda" else (
                f"CPU time of the calling thread, {torch.get_num_threads()} PyTorch thread(s)")
            print(f"median of {args.repeats} interleaved calls, {clock}, {dtype}", flush=True)
            print(f"{'draft':>7} {'target':>7} {'batch':>5} {'part':>8} {'plain ms':>9} "
                  f"{'upstr ms':>9} {'short ms':>9} {'plain/sh':>8} {'upstr/sh':>8} "
                  f"{'plain MiB':>9} {'upstr MiB':>9} {'short MiB':>9} same", flush=True)
        for row in bench(args.hidden, args.target_vocab,
                         [int(v) for v in args.draft_vocabs.split(",")],
                         [int(b) for b in args.batches.split(",")], args.repeats, device, dtype):
            mismatches += not row["same_tokens"]
            if args.json:
                print(json.dumps(row), flush=True)
                continue
            print(f"{row['draft_vocab']:>7} {row['target_vocab']:>7} {row['batch']:>5} "
                  f"{row['part']:>8} {row['plain_ms']:>9.3f} "
                  f"{_fmt(row['upstream_local_ms'], '9.3f')} {row['shortcut_ms']:>9.3f} "
                  f"{row['ratio']:>8.2f} {_fmt(row['ratio_vs_upstream_local'], '8.2f')} "
                  f"{row['plain_extra_mb']:>9.2f} "
                  f"{_fmt(row['upstream_local_extra_mb'], '9.2f')} "
                  f"{row['shortcut_extra_mb']:>9.2f} {row['same_tokens']}", flush=True)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
