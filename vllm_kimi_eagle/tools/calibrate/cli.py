"""``vllm-kimi-eagle calibrate``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.draft_config import DraftConfig
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_ENV, CONVENTION_KEY
from vllm_kimi_eagle.fixtures.offline import CALIBRATE_PROMPTS
from vllm_kimi_eagle.tools.calibrate import __doc__ as DESCRIPTION
from vllm_kimi_eagle.tools.calibrate import candidates, scoring
from vllm_kimi_eagle.tools.calibrate import decision as decisions
from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError, Reading
from vllm_kimi_eagle.tools.calibrate.capture import CaptureStore, run_engine
from vllm_kimi_eagle.tools.calibrate.inputs import (
    check_draft,
    check_out_folder,
    parse_thetas,
    resolve_model,
)
from vllm_kimi_eagle.tools.calibrate.prompts import default_prompts, is_tiny_target, read_prompts
from vllm_kimi_eagle.tools.calibrate.report import format_table, summary, write_copy
from vllm_kimi_eagle.tools.figures import paired
from vllm_kimi_eagle.tools.figures.progress import say
from vllm_kimi_eagle.tools.models.config_access import text_config_value

EXIT_RECOMMEND, EXIT_ERROR = 3, 2
TINY_ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}
# First round, most prompts, greedy tokens each, and seconds for capturing and scoring.
# The tiny drafts are never trained on the first round's prompts (offline.held_out_prompts).
TINY_DEFAULTS = {"num_prompts": CALIBRATE_PROMPTS, "max_prompts": 256, "max_tokens": 64,
                 "time_budget": 180}
REAL_DEFAULTS = {"num_prompts": 24, "max_prompts": 24, "max_tokens": 256, "time_budget": 3600}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle calibrate", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True,
                   help="the target model: a folder or a hub id (from the Hugging Face cache "
                        "or fetched as vLLM would fetch it)")
    p.add_argument("--draft", required=True, help="the draft model: a folder or a hub id")
    p.add_argument("--revision", help="the draft's hub revision (branch, tag or commit)")
    p.add_argument("--target-revision", help="the target's hub revision")
    p.add_argument("--prompts", help="JSONL file of prompts (default: the tiny corpus for the "
                                     "tiny models, a built-in chat/code/maths mix otherwise)")
    p.add_argument("--num-prompts", type=int, help="prompts of the first round (default 16 "
                                                   "tiny / 24); each round doubles them until "
                                                   "the comparison is decided")
    p.add_argument("--max-prompts", type=int, help="most prompts to measure (default 256 "
                                                   "tiny / every built-in or file prompt)")
    p.add_argument("--time-budget", type=float, help="seconds for capturing and scoring "
                                                     "(default 180 tiny / 3600); a round that "
                                                     "would not fit is not started")
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


def score_readings(readings: list[Reading], models: dict, capture, k: int):
    """Per reading, per prompt of ``capture``: matched counts [prompts, k], and the
    positions per prompt (the same for every reading)."""
    matched, positions = {}, None
    for i, reading in enumerate(readings):
        model, d2t = models[reading.rope_theta, reading.nope]
        matched[i], positions = scoring.score(model, d2t, capture, reading.capture_ids, k)
    return matched, positions


def load_models(readings: list[Reading], draft: str, target: str, device: str | None,
                draft_config: DraftConfig) -> dict:
    """The reference draft per rope base and rope dims' reading asked for."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kinds = {(r.rope_theta, r.nope): candidates.served_nope(r, draft_config) for r in readings}
    return {(theta, nope): scoring.load_draft(draft, target, theta, device, served)
            for (theta, nope), served in kinds.items()}


def rows_of(readings: list[Reading], matched: dict, positions) -> list[dict]:
    rows = []
    for i, reading in enumerate(readings):
        length, by_position = scoring.acceptance(matched[i], positions)
        rows.append({"reading": reading.name, "capture_ids": list(reading.capture_ids),
                     "rope_theta": reading.rope_theta, "nope": reading.nope,
                     "labels": list(reading.labels),
                     "acceptance_length": round(length, 4),
                     "per_position": [round(p, 4) for p in by_position],
                     "drafts": int(positions.sum())})
    return rows


def round_sizes(first: int, most: int) -> list[int]:
    """Prompts measured after each round: ``first``, doubled, up to ``most``."""
    sizes = [min(first, most)]
    while sizes[-1] < most:
        sizes.append(min(2 * sizes[-1], most))
    return sizes


def measure(readings, current, pool, store, models, args, budget) -> tuple:
    """Rounds of prompts until the comparison is decided, the prompts run out or the next
    round would not fit in ``budget`` seconds. Returns (rows, decision, rounds)."""
    import torch

    started = time.perf_counter()
    sizes = round_sizes(args.num_prompts, len(pool))
    confidence = decisions.per_look(len(sizes))
    matched = {i: torch.zeros(0, args.k) for i in range(len(readings))}
    positions, done, rounds = torch.zeros(0), 0, []
    for size in sizes:
        t = time.perf_counter()
        requests = store.requests(pool[done:size])
        capture = scoring.load_capture(store.folder, requests, store.layers)
        new, new_positions = score_readings(readings, models, capture, args.k)
        matched = {i: torch.cat([matched[i], new[i]]) for i in matched}
        positions, done = torch.cat([positions, new_positions]), size
        rows = rows_of(readings, matched, positions)
        per_prompt = {i: scoring.per_prompt(matched[i], positions) for i in matched}
        for i, mean in decisions.per_prompt_means(per_prompt).items():
            rows[i]["per_prompt_mean"] = round(mean, 4)
        decision = decisions.decide(rows, current, per_prompt, confidence)
        difference = decision["difference"]
        rounds.append({"prompts": size, "seconds": round(time.perf_counter() - t, 1),
                       "status": decision["status"], "difference": difference})
        interval = (f" (difference {difference['mean']:+.3f}, "
                    f"{paired.interval_words(difference)})"
                    if difference and difference["low"] is not None else "")
        say(f"round {len(rounds)}: {size} prompts, {decision['status']}{interval} "
            f"({rounds[-1]['seconds']} s)")
        if decision["status"] != decisions.UNDECIDED or decision.get("final"):
            break  # decided, or no number of prompts would decide it
        following = next((n for n in sizes if n > size), None)
        if following is None:
            decision["why"] += f" (every one of the {size} prompts measured)"
            break
        estimate = rounds[-1]["seconds"] * (following - size) / max(size - (
            rounds[-2]["prompts"] if len(rounds) > 1 else 0), 1)
        if time.perf_counter() - started + estimate > budget:
            decision["why"] += (f" (time budget: {budget:.0f} s; the next round, {following} "
                                f"prompts, would take about {estimate:.0f} s more)")
            break
    decision["confidence"] = confidence
    return rows, decision, rounds


def confirm(rows: list[dict], readings: list[Reading], which: list[int], draft: str,
            draft_config: DraftConfig, draft_raw: dict, layer_prefix: str | None,
            target: str, prompts: list[dict], max_tokens: int,
            engine_args: dict, k: int, out: str) -> None:
    """Serve each reading in ``which`` with vLLM (a calibrated copy of the draft; the
    copy is what --write would write) and put its online acceptance in its row."""
    for i in which:
        copy = os.path.join(out, f"confirm-{i}")
        shutil.rmtree(copy, ignore_errors=True)
        setting = candidates.setting(readings[i], draft_config, layer_prefix)
        write_copy(draft, draft_raw, setting, copy)
        say(f"confirm: serving {readings[i].name} with vLLM (log {copy}.log) ...")
        # What config.json cannot say (a convention against its training tool's) is said
        # the one other way, through the environment.
        env = {} if CONVENTION_KEY in setting["config.json"] else {
            key: value for key, value in setting["environment"].items() if key == CONVENTION_ENV}
        result = run_engine("serve", {"target": target, "draft": copy, "prompts": prompts,
                                      "max_tokens": max_tokens, "k": k,
                                      "engine_args": engine_args}, copy + ".log", env)
        if not result.get("drafts"):
            raise CalibrationError(f"serving {readings[i].name} proposed no draft; see "
                                   f"{copy}.log")
        rows[i]["online"] = {key: result.get(key) for key in
                             ("acceptance_length", "acceptance_by_position", "drafts",
                              "per_prompt")}
        say(f"confirm: {readings[i].name}: online acceptance {result['acceptance_length']} "
            f"(engine start {result['start_s']} s)")


def calibrate(args) -> int:
    started = time.perf_counter()
    target, target_config = resolve_model(args.target, args.target_revision, "target")
    draft, draft_raw = resolve_model(args.draft, args.revision, "draft")
    layers = candidates.check_target(target_config, target)
    draft_config = check_draft(draft, draft_raw, target_config)
    if args.write:
        check_out_folder(args.write, draft)
    tiny = is_tiny_target(target)
    defaults = TINY_DEFAULTS if tiny else REAL_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    try:
        engine_args = {**(TINY_ENGINE_ARGS if tiny else {}), **json.loads(args.engine_args)}
    except ValueError as err:
        raise CalibrationError(f"--engine-args is not JSON: {err}") from None
    if args.k < 1 or args.max_tokens <= args.k or args.num_prompts < 1 or args.max_prompts < 1:
        raise CalibrationError(f"--k {args.k}, --max-tokens {args.max_tokens}, --num-prompts "
                               f"{args.num_prompts}, --max-prompts {args.max_prompts}: give "
                               "k >= 1, more greedy tokens than k and at least one prompt")
    if args.prompts:
        pool, source = read_prompts(args.prompts)[:args.max_prompts], args.prompts
    else:
        pool, source = default_prompts(target, args.max_prompts)
    after_last = vllm_compat.can_capture_after_last_layer()
    readings = candidates.readings(draft_config, layers, after_last,
                                   parse_thetas(args.rope_theta))
    if not readings:
        raise CalibrationError(
            f"{draft}/config.json: no reading of its layer ids "
            f"{[ids for _, ids in draft_config.id_lists]} names layers this "
            f"target can capture (1..{candidates.highest_capture_id(layers, after_last)}); "
            "check that the draft belongs to this target")
    tensors = checkpoint.read_checkpoint(draft)
    prefix = checkpoint.layer_prefix(tensors)
    today, today_line = candidates.current_reading(
        draft_config, layers, after_last, checkpoint.fc_in_features(tensors),
        text_config_value(target_config, "hidden_size"), prefix,
        environ={})
    say(f"calibrate: {draft} on {target}; {len(readings)} readings; today: {today_line}")
    say(f"prompts: up to {len(pool)} from {source} in rounds from {min(args.num_prompts, len(pool))}"
        f", {args.max_tokens} greedy tokens each, k={args.k}; time budget {args.time_budget:.0f} s")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    capture_dir = os.path.abspath(args.capture or os.path.join(out, "capture"))
    try:
        extra = [int(v) for v in args.capture_layers.split(",") if v.strip()]
    except ValueError:
        raise CalibrationError(f"--capture-layers {args.capture_layers!r}: give layer ids, "
                               "e.g. 1,2,3") from None
    needed = sorted({i for r in readings for i in r.capture_ids} | set(extra))
    current = next((i for i, r in enumerate(readings)
                    if r.capture_ids == today and r.rope_theta is None and r.nope is None),
                   None)
    models = load_models(readings, draft, target, args.device, draft_config)
    with CaptureStore(capture_dir, target, needed, args.max_tokens, engine_args) as store:
        rows, decision, rounds = measure(readings, current, pool, store, models, args,
                                         args.time_budget)
        manifest = store.manifest
    prompts = pool[:rounds[-1]["prompts"]]
    if not args.no_confirm:
        which = sorted({decision["row"]} | ({current} if current is not None else set()))
        confirm(rows, readings, which, draft, draft_config, draft_raw, prefix, target,
                prompts, args.max_tokens,
                engine_args, args.k, out)
        decision = decisions.recheck_online(decision, rows, current)
    chosen = decision["row"]
    setting = candidates.setting(readings[chosen], draft_config, prefix,
                                 measured=decision["status"] != decisions.UNDECIDED)
    if args.write:
        write_copy(draft, draft_raw, setting, args.write)
    report = {
        "draft": draft, "target": target, "k": args.k, "prompts": len(prompts),
        "max_tokens": args.max_tokens, "seconds": round(time.perf_counter() - started, 1),
        "capture": {"layers": manifest["layers"], "seconds": manifest.get("seconds"),
                    "engine_start_s": manifest.get("start_s")},
        "rounds": rounds, "confidence_per_round": round(decision["confidence"], 4),
        "candidates": rows,
        "current": ({"capture_ids": list(today), "reading": rows[current]["reading"],
                     "acceptance_length": rows[current]["acceptance_length"],
                     "online": rows[current].get("online")} if current is not None
                    else {"capture_ids": None, "refused": today_line}),
        "recommended": {"capture_ids": rows[chosen]["capture_ids"],
                        "reading": rows[chosen]["reading"],
                        "rope_theta": rows[chosen]["rope_theta"],
                        "nope": candidates.served_nope(readings[chosen], draft_config),
                        "setting": setting,
                        "acceptance_length": rows[chosen]["acceptance_length"],
                        "online": rows[chosen].get("online"), "status": decision["status"],
                        "beats_current": decision["beats_current"],
                        "difference": decision["difference"],
                        "online_difference": decision.get("online_difference"),
                        "why": decision["why"]},
    }
    say(format_table(rows, current, chosen))
    with open(os.path.join(out, "calibrate.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report) if args.json else summary(report, args))
    return EXIT_RECOMMEND if decision["beats_current"] else 0

