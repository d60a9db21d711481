"""``vllm-kimi-eagle calibrate``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from vllm_kimi_eagle import checkpoint, vllm_compat
from vllm_kimi_eagle.config_access import text_config_value
from vllm_kimi_eagle.tools.calibrate import __doc__ as DESCRIPTION
from vllm_kimi_eagle.tools.calibrate import candidates, scoring
from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError, Reading
from vllm_kimi_eagle.tools.calibrate.capture import ensure_capture, run_engine
from vllm_kimi_eagle.tools.calibrate.decision import decide, recheck_online
from vllm_kimi_eagle.tools.calibrate.inputs import (
    check_draft,
    check_out_folder,
    parse_thetas,
    read_config,
)
from vllm_kimi_eagle.tools.calibrate.prompts import default_prompts, is_tiny_target, read_prompts
from vllm_kimi_eagle.tools.calibrate.report import format_table, summary, write_copy
from vllm_kimi_eagle.tools.progress import say

EXIT_RECOMMEND, EXIT_ERROR = 3, 2
TINY_ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}
TINY_DEFAULTS = {"num_prompts": 16, "max_tokens": 64}
REAL_DEFAULTS = {"num_prompts": 24, "max_tokens": 256}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle calibrate", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="the target model folder")
    p.add_argument("--draft", required=True, help="the draft model folder")
    p.add_argument("--prompts", help="JSONL file of prompts (default: the tiny corpus for the "
                                     "tiny models, a built-in chat/code/maths mix otherwise)")
    p.add_argument("--num-prompts", type=int, help="how many built-in prompts (default 16 "
                                                   "tiny / 24)")
    p.add_argument("--max-tokens", type=int, help="greedy tokens per prompt (default 64 tiny "
                                                  "/ 256)")
    p.add_argument("--k", type=int, default=3, help="speculative tokens scored (default 3)")
    p.add_argument("--rope-theta", help="other rope bases to measure, e.g. 10000,50000")
    p.add_argument("--engine-args", default="{}",
                   help='JSON of vLLM LLM() arguments for both engines, e.g. '
                        '\'{"tensor_parallel_size": 8, "trust_remote_code": true}\'')
    p.add_argument("--capture", help="folder of the capture (default OUT/capture); reused "
                                     "when it holds the same target, prompts and layers")
    p.add_argument("--capture-layers", default="",
                   help="also capture these layers (comma list), so that one capture serves "
                        "several drafts")
    p.add_argument("--no-confirm", action="store_true",
                   help="skip serving the recommended and today's reading with vLLM")
    p.add_argument("--device", default=None, help="where the drafts are scored (default: "
                                                  "cuda when available, else cpu)")
    p.add_argument("--write", help="write a calibrated copy of the draft folder here")
    p.add_argument("--out", default="out/calibrate")
    p.add_argument("--json", action="store_true", help="the last stdout line is one JSON "
                                                       "object")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return calibrate(args)
    except CalibrationError as err:
        print(f"vllm-kimi-eagle calibrate: {err}", file=sys.stderr)
        return EXIT_ERROR


def score_readings(readings: list[Reading], draft: str, target: str, capture, args):
    """One row per reading (offline acceptance, per position, positions scored), the
    per-prompt counts behind each, and the positions per prompt (the same for all)."""
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows, matched, models, positions = [], {}, {}, None
    for i, reading in enumerate(readings):
        if reading.rope_theta not in models:
            models[reading.rope_theta] = scoring.load_draft(draft, target, reading.rope_theta,
                                                            device)
        model, d2t = models[reading.rope_theta]
        t = time.perf_counter()
        matched[i], positions = scoring.score(model, d2t, capture, reading.capture_ids, args.k)
        length, by_position = scoring.acceptance(matched[i], positions)
        rows.append({"reading": reading.name, "capture_ids": list(reading.capture_ids),
                     "rope_theta": reading.rope_theta, "labels": list(reading.labels),
                     "acceptance_length": round(length, 4),
                     "per_position": [round(p, 4) for p in by_position],
                     "drafts": int(positions.sum())})
        say(f"  [{i + 1}/{len(readings)}] {reading.name}: offline acceptance {length:.3f} "
            f"({time.perf_counter() - t:.1f} s)")
    return rows, matched, positions


def confirm(rows: list[dict], readings: list[Reading], which: list[int], draft: str,
            draft_config: dict, target: str, prompts: list[dict], max_tokens: int,
            engine_args: dict, k: int, out: str) -> None:
    """Serve each reading in ``which`` with vLLM (a calibrated copy of the draft; the
    copy is what --write would write) and put its online acceptance in its row."""
    for i in which:
        copy = os.path.join(out, f"confirm-{i}")
        shutil.rmtree(copy, ignore_errors=True)
        write_copy(draft, draft_config, candidates.setting(readings[i], draft_config), copy)
        say(f"confirm: serving {readings[i].name} with vLLM (log {copy}.log) ...")
        result = run_engine("serve", {"target": target, "draft": copy, "prompts": prompts,
                                      "max_tokens": max_tokens, "k": k,
                                      "engine_args": engine_args}, copy + ".log")
        if not result.get("drafts"):
            raise CalibrationError(f"serving {readings[i].name} proposed no draft; see "
                                   f"{copy}.log")
        rows[i]["online"] = {key: result[key] for key in
                             ("acceptance_length", "acceptance_by_position", "drafts")}
        say(f"confirm: {readings[i].name}: online acceptance {result['acceptance_length']} "
            f"(engine start {result['start_s']} s)")


def calibrate(args) -> int:
    started = time.perf_counter()
    target, draft = os.path.abspath(args.target), os.path.abspath(args.draft)
    target_config = read_config(target, "target")
    draft_config = read_config(draft, "draft")
    layers = candidates.check_target(target_config, target)
    check_draft(draft, draft_config, target_config)
    if args.write:
        check_out_folder(args.write, draft)
    tiny = is_tiny_target(target)
    defaults = TINY_DEFAULTS if tiny else REAL_DEFAULTS
    try:
        engine_args = {**(TINY_ENGINE_ARGS if tiny else {}), **json.loads(args.engine_args)}
    except ValueError as err:
        raise CalibrationError(f"--engine-args is not JSON: {err}") from None
    if args.prompts:
        prompts, source = read_prompts(args.prompts), args.prompts
    else:
        prompts, source = default_prompts(target, args.num_prompts or defaults["num_prompts"])
    max_tokens = args.max_tokens or defaults["max_tokens"]
    if args.k < 1 or max_tokens <= args.k or (args.num_prompts is not None
                                              and args.num_prompts < 1):
        raise CalibrationError(f"--k {args.k}, --max-tokens {max_tokens}, --num-prompts "
                               f"{args.num_prompts}: give k >= 1, more greedy tokens than k "
                               "and at least one prompt")
    after_last = vllm_compat.can_capture_after_last_layer()
    readings = candidates.readings(draft_config, layers, after_last,
                                   parse_thetas(args.rope_theta))
    if not readings:
        raise CalibrationError(
            f"{draft}/config.json: no reading of its layer ids "
            f"{[ids for _, ids in candidates.written_lists(draft_config)]} names layers this "
            f"target can capture (1..{candidates.highest_capture_id(layers, after_last)}); "
            "check that the draft belongs to this target")
    tensors = checkpoint.read_checkpoint(draft)
    today, today_line = candidates.current_reading(
        draft_config, layers, after_last, checkpoint.fc_in_features(tensors),
        text_config_value(target_config, "hidden_size"), checkpoint.layer_prefix(tensors),
        environ={})
    say(f"calibrate: {draft} on {target}; {len(readings)} readings; today: {today_line}")
    say(f"prompts: {len(prompts)} from {source}, {max_tokens} greedy tokens each, k={args.k}")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    capture_dir = os.path.abspath(args.capture or os.path.join(out, "capture"))
    try:
        extra = [int(v) for v in args.capture_layers.split(",") if v.strip()]
    except ValueError:
        raise CalibrationError(f"--capture-layers {args.capture_layers!r}: give layer ids, "
                               "e.g. 1,2,3") from None
    needed = sorted({i for r in readings for i in r.capture_ids} | set(extra))
    manifest = ensure_capture(capture_dir, target, needed, prompts, max_tokens, engine_args)
    capture = scoring.load_capture(capture_dir, manifest)
    rows, matched, positions = score_readings(readings, draft, target, capture, args)
    samples = scoring.bootstrap(matched, positions)
    for i, row in enumerate(rows):
        row["interval"] = [round(float(q), 4) for q in _quantiles(samples[i])]
    current = next((i for i, r in enumerate(readings)
                    if r.capture_ids == today and r.rope_theta is None), None)
    decision = decide(rows, current, samples)
    if not args.no_confirm:
        which = sorted({decision["row"]} | ({current} if current is not None else set()))
        confirm(rows, readings, which, draft, draft_config, target, prompts, max_tokens,
                engine_args, args.k, out)
        decision = recheck_online(decision, rows, current)
    chosen = decision["row"]
    setting = candidates.setting(readings[chosen], draft_config)
    if args.write:
        write_copy(draft, draft_config, setting, args.write)
    report = {
        "draft": draft, "target": target, "k": args.k, "prompts": len(prompts),
        "max_tokens": max_tokens, "seconds": round(time.perf_counter() - started, 1),
        "capture": {"layers": manifest["layers"], "seconds": manifest.get("seconds"),
                    "engine_start_s": manifest.get("start_s")},
        "candidates": rows,
        "current": ({"capture_ids": list(today),
                     "acceptance_length": rows[current]["acceptance_length"],
                     "online": rows[current].get("online")} if current is not None
                    else {"capture_ids": None, "refused": today_line}),
        "recommended": {"capture_ids": rows[chosen]["capture_ids"],
                        "rope_theta": rows[chosen]["rope_theta"], "setting": setting,
                        "acceptance_length": rows[chosen]["acceptance_length"],
                        "online": rows[chosen].get("online"),
                        "beats_current": decision["beats_current"], "why": decision["why"]},
    }
    say(format_table(rows, current, chosen))
    with open(os.path.join(out, "calibrate.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report) if args.json else summary(report, args))
    return EXIT_RECOMMEND if decision["beats_current"] else 0


def _quantiles(values):
    import numpy as np

    return np.quantile(values, [0.05, 0.95])
