"""The soak's report: a text summary for people, ``report.json`` for tools and the docs, and
every outcome in ``outcomes.jsonl``."""

from __future__ import annotations

import dataclasses
import json
import os

from vllm_kimi_eagle.tools.figures import request_metrics
from vllm_kimi_eagle.tools.soak.checks import DRAFT, NONE


def format_windows(windows: list) -> str:
    """One line per window: time, the draft server's acceptance and both servers'
    preemptions and memory."""
    lines = ["window  seconds  acceptance (draft)  preemptions draft/none  RSS MiB draft/none"]
    by_index: dict[int, dict] = {}
    for w in windows:
        by_index.setdefault(w.index, {})[w.server] = w
    for index, pair in sorted(by_index.items()):
        draft, none = pair.get(DRAFT), pair.get(NONE)
        length = draft.counters["acceptance_length"] if draft else None
        lines.append(
            f"{index:>6}  {draft.seconds if draft else none.seconds:>7.1f}  "
            f"{length if length is not None else '-':>18}  "
            f"{draft.preemptions if draft else 0:>11.0f}/{none.preemptions if none else 0:<10.0f}  "
            f"{(draft.rss if draft else 0) / 2**20:>7.0f}/{(none.rss if none else 0) / 2**20:.0f}")
    return "\n".join(lines)


def format_checks(results: list[dict]) -> str:
    return "\n".join(f"{'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {c['detail']}"
                     for c in results)


def format_bench(bench: dict) -> str:
    if not bench:
        return ""
    lines = [f"vllm bench serve ({bench['settings']}):"]
    none = bench.get(NONE, {})
    for name in (NONE, DRAFT):
        figures = bench.get(name, {})
        if "error" in figures:
            lines.append(f"  {name}: {figures['error']}")
            continue
        ratio = ""
        if name == DRAFT and none.get("output_throughput") and figures.get("output_throughput"):
            ratio = f" ({figures['output_throughput'] / none['output_throughput']:.2f}x none)"
        length = figures.get("spec_decode_acceptance_length")
        lines.append(
            f"  {name}: {figures.get('output_throughput', 0):.1f} output tok/s{ratio}, "
            f"median TPOT {figures.get('median_tpot_ms', 0):.1f} ms"
            + (f", acceptance {length:.3f}" if length else "")
            + f", {figures.get('completed')} completed, {figures.get('failed')} failed")
    return "\n".join(lines)


def per_request(outcomes: dict, k: int) -> dict:
    """The draft server's per-request acceptance: vLLM reports it for non-streamed,
    single-choice requests (streams only with usage asked for, n > 1 never)."""
    found = [request_metrics.RequestAcceptance.from_dict(o.acceptance)
             for o in outcomes.values() if o.acceptance]
    return {"reported": len(found), "of": len(outcomes),
            **request_metrics.distribution(found, k)}


def format_per_request(figures: dict) -> str:
    if not figures.get("requests"):
        return (f"per request: none of the draft server's {figures['of']} requests reported "
                "its acceptance (vLLM 0.29 or later reports non-streamed, single-choice ones)")
    return (f"per request (the draft server's {figures['reported']} of {figures['of']} "
            f"requests that report it: non-streamed, one choice): acceptance length p10 "
            f"{figures['p10']} / p50 {figures['p50']} / p90 {figures['p90']}")


def write(out: str, summary: dict, windows: list, outcomes: dict, plan: list) -> list[str]:
    """report.json (settings, checks, windows, bench figures, memory) and outcomes.jsonl."""
    report_path = os.path.join(out, "report.json")
    with open(report_path, "w") as f:
        json.dump({**summary, "windows": [dataclasses.asdict(w) for w in windows]}, f, indent=1)
    outcomes_path = os.path.join(out, "outcomes.jsonl")
    with open(outcomes_path, "w") as f:
        for request in plan:
            f.write(json.dumps({"request": dataclasses.asdict(request),
                                **{name: by_id[request.id].as_dict()
                                   for name, by_id in outcomes.items()}}) + "\n")
    return [report_path, outcomes_path]
