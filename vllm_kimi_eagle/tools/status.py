"""``vllm-kimi-eagle status URL``: what a running vLLM server does with its draft.

    vllm-kimi-eagle status http://HOST:PORT [--window SECONDS] [--json]

Reads the server's ``/metrics`` twice, ``--window`` seconds apart (default 30), and
prints:

- the plugin's plan as each worker enacted it (the ``vllm_kimi_eagle_info`` metric: the
  class serving the draft, the capture ids and how the draft's ids were read, NoPE, the
  rope base, the greedy shortcut, versions, whether vLLM enacted it), or that the server
  runs without the plugin acting on a draft;
- live acceptance over the window, from vLLM's own spec-decode counters: the mean
  acceptance length and the acceptance by draft position;
- a hint where the shape points to a misread draft (a first position far below what
  served drafts accept), naming ``calibrate``.

Per-request figures are not on ``/metrics``: vLLM returns them in each response, with
``--per-request-spec-decode-metrics``; ``vllm-kimi-eagle compare --url`` sends your
requests to a running server and reports their distribution and acceptance by prompt
length. Nothing is sent to the server here but two GETs of ``/metrics``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

from vllm_kimi_eagle.serving.plan_metric import METRIC
from vllm_kimi_eagle.tools.figures import spec_metrics

# A served Kimi draft's first position: lightseekorg's cards give acceptance lengths of
# 2.9 to 3.2 at k=3 (docs/measurements.md), which needs about 0.8 there; a draft reading
# other layers than it was trained on, or its positions served otherwise, accepts little.
LOW_FIRST_POSITION = 0.3


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle status", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--window", type=float, default=30.0,
                   help="seconds between the two scrapes the acceptance is measured over "
                        "(default 30); 0: the counters since the server started")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = p.parse_args(argv)
    if args.window < 0:
        p.error(f"--window is {args.window}; give 0 or more seconds")
    return args


class StatusError(RuntimeError):
    """The URL does not answer as a vLLM server's /metrics does."""


def fetch_metrics(url: str, timeout: float = 30) -> str:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout) as response:
            return response.read().decode()
    except (urllib.error.URLError, OSError) as err:
        raise StatusError(f"{url}/metrics could not be read ({err}); give the address the "
                          "vLLM server listens on, e.g. http://127.0.0.1:8000") from None


def plan_rows(scrape: spec_metrics.Scrape) -> list[dict]:
    """Each worker's sample of the plugin's info metric, as a dict of its labels and its
    value (1: vLLM enacted the plan)."""
    return [{**dict(labels), "enacted": value == 1.0}
            for labels, value in sorted(scrape.samples.get(METRIC, {}).items())]


def is_vllm(scrape: spec_metrics.Scrape) -> bool:
    return any(name.startswith("vllm:") for name in scrape.samples)


def status(first: spec_metrics.Scrape, second: spec_metrics.Scrape, seconds: float) -> dict:
    """What the two scrapes say: the plan, the window's acceptance, a hint."""
    if not is_vllm(second):
        raise StatusError("the /metrics at that address carries no vllm: metric: not a vLLM "
                          "server")
    counters = spec_metrics.spec_counters(second - first)
    found = {"plan": plan_rows(second), "window_seconds": round(seconds, 1),
             "speculative": spec_metrics.has_spec_counters(second),
             "acceptance": counters.summary(), "hints": []}
    by_position = counters.acceptance_by_position
    if by_position and by_position[0] < LOW_FIRST_POSITION:
        found["hints"].append(
            f"the first draft position accepts {by_position[0]:.2f} of its tokens, where "
            f"served Kimi drafts accept about 0.8 (acceptance lengths of 2.9-3.2 at k=3 on "
            "their model cards): the draft may read other target layers than it was trained "
            "on, or its positions (NoPE, rope base) may be served otherwise. Measure the "
            "readings with `vllm-kimi-eagle calibrate --target TARGET --draft DRAFT`.")
    if found["plan"] and not all(row["enacted"] for row in found["plan"]):
        found["hints"].append(
            "a worker's self-check found vLLM serving the draft otherwise than the plugin "
            "decided (the server runs with VLLM_KIMI_EAGLE_SELF_CHECK=warn): its log names "
            "each difference.")
    return found


def format_status(found: dict, url: str) -> str:
    lines = [f"server        {url}"]
    if not found["plan"]:
        lines.append("plugin        not acting on a draft here: no vllm_kimi_eagle_info on "
                     "/metrics (the plugin is not installed, is off, or the server serves "
                     "no EAGLE3 MLA draft it decides for)")
    for row in found["plan"]:
        lines.append(
            f"plan          {row['draft']} ({row['worker']}): {row['draft_class']} class, "
            f"capture ids [{row['capture_ids']}] ({row['convention'] or 'read as written'}), "
            f"{'NoPE' if row['nope'] == 'true' else 'RoPE'}, rope base {row['rope_theta']}, "
            f"greedy shortcut {row['shortcut'] or 'n/a'}; {row['self_check']} by vLLM; "
            f"plugin {row['plugin_version']}, vLLM {row['vllm_version']}")
    acceptance = found["acceptance"]
    if not found["speculative"]:
        lines.append("acceptance    the server drafts nothing: no speculative decoding")
    elif not acceptance["drafts"]:
        lines.append(f"acceptance    no draft proposed in the last {found['window_seconds']} s "
                     "(no traffic?): try a longer --window")
    else:
        lines.append(
            f"acceptance    {acceptance['acceptance_length']:.3f} over "
            f"{found['window_seconds']} s ({acceptance['drafts']} drafts, "
            f"{acceptance['accepted_tokens']} of {acceptance['draft_tokens']} draft tokens "
            "accepted); by position "
            + " ".join(f"{rate:.3f}" for rate in acceptance["acceptance_by_position"]))
    lines += [f"hint          {hint}" for hint in found["hints"]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        first = spec_metrics.Scrape.parse(fetch_metrics(args.url)) if args.window else \
            spec_metrics.Scrape()
        started = time.monotonic()
        if args.window:
            time.sleep(args.window)
        second = spec_metrics.Scrape.parse(fetch_metrics(args.url))
        found = status(first, second, time.monotonic() - started)
    except StatusError as err:
        print(f"vllm-kimi-eagle status: {err}", file=sys.stderr)
        return 2
    print(json.dumps(found) if args.json else format_status(found, args.url))
    return 0
