"""What ``calibrate`` prints and writes: the candidates table, the recommendation in words,
and the calibrated copy of the draft folder."""

from __future__ import annotations

import json
import os
import shutil

from vllm_kimi_eagle.draft.draft_config import ROPE_BLOCKS


def format_table(rows: list[dict], current: int | None, recommended: int) -> str:
    header = ["", "capture (input of)", "rope", "reading", "offline, per prompt",
              "pooled", "per position", "positions", "online accept"]
    table = [header]
    for i, r in enumerate(rows):
        mark = ("*" if i == recommended else " ") + ("=" if i == current else " ")
        rope = "config" if r["rope_theta"] is None else f"{r['rope_theta']:g}"
        if r.get("nope") is not None:
            rope += ", NoPE" if r["nope"] else ", RoPE"
        table.append([mark, str(r["capture_ids"]), rope, "; ".join(r["labels"]),
                      "-" if r.get("per_prompt_mean") is None else f"{r['per_prompt_mean']:.3f}",
                      f"{r['acceptance_length']:.3f}",
                      " ".join(f"{p:.2f}" for p in r["per_position"]), str(r["drafts"]),
                      "-" if r.get("online") is None else f"{r['online']['acceptance_length']:.3f}"])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in table]
    return "\n".join(lines + ["(* recommended, = what the plugin reads today; the mean over "
                               "prompts decides, the pooled figure weighs long prompts more)"])


def summary(report: dict, args) -> str:
    rec = report["recommended"]
    setting = rec["setting"]
    how = ", ".join(f"{k} {json.dumps(v)}" for k, v in setting["config.json"].items()) or "nothing"
    env = " ".join(f"{k}={v}" for k, v in setting["environment"].items())
    if report["current"].get("capture_ids") is None:
        head = (f"today the plugin refuses this draft ({report['current']['refused']}); "
                f"the best reading captures {rec['capture_ids']}")
    elif rec["beats_current"]:
        head = (f"RECOMMENDED: {_reading(rec)} (acceptance {rec['acceptance_length']}"
                f" offline) instead of today's {_reading(report['current'])} "
                f"({report['current']['acceptance_length']}): {rec['why']}")
    elif rec["status"] == "undecided":
        head = (f"UNDECIDED: keeping today's reading {rec['capture_ids']} (acceptance "
                f"{rec['acceptance_length']} offline) for want of evidence: {rec['why']}")
    else:
        head = (f"keep today's reading {rec['capture_ids']} (acceptance "
                f"{rec['acceptance_length']} offline): {rec['why']}")
    lines = [head, f"to state it explicitly, in the draft's config.json: {how}"
             + (f"; or set {env}" if env else "")]
    if args.write:
        lines.append(f"wrote a calibrated copy of the draft to {args.write}")
    return "\n".join(lines)


def _reading(side: dict) -> str:
    """A reading in words: its capture ids, with the rope base and dims where measured."""
    name = side.get("reading") or str(side["capture_ids"])
    return f"capture {name}"


def write_copy(draft: str, config: dict, setting: dict, folder: str) -> None:
    """The draft folder with config.json carrying ``setting``: tensors hard-linked (or
    copied), the user's folder untouched."""
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(draft):
        source, dest = os.path.join(draft, name), os.path.join(folder, name)
        if name == "config.json" or os.path.isdir(source):
            continue
        try:
            os.link(source, dest)
        except OSError:
            shutil.copy2(source, dest)
    written = dict(config, **setting["config.json"])
    if "rope_theta" in setting["config.json"]:  # every block that carries a base says it too
        for block in ROPE_BLOCKS:
            if isinstance(written.get(block), dict) and "rope_theta" in written[block]:
                written[block] = dict(written[block],
                                      rope_theta=setting["config.json"]["rope_theta"])
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(written, f, indent=2)
