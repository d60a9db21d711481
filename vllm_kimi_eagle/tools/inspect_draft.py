"""``vllm-kimi-eagle inspect DRAFT [--target TARGET] [--json]``: what vLLM will make of a draft.

Reads config.json files and safetensors headers only (no weights, no vLLM engine) and
reports the draft's layout, MLA dimensions, layer ids and the convention decision, and
every problem that would stop serving or cost acceptance. Run it when acceptance is
lower than expected.
"""

from __future__ import annotations

import json
import os
from collections import Counter

from vllm_kimi_eagle import checkpoint, rope_override, vllm_compat
from vllm_kimi_eagle.config_access import text_config_value
from vllm_kimi_eagle.draft_spec import DraftConfigError, canonical_name, spec_from_config
from vllm_kimi_eagle.layer_ids import (
    LayerIdError,
    ambiguity_advice,
    resolve_layer_ids,
    written_ids,
)

MLA_FIELDS = ("hidden_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size")


def _read_config(folder: str) -> dict:
    path = os.path.join(folder, "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{path}: not found; pass a model folder.") from err


def layout(tensors: dict[str, checkpoint.TensorInfo]) -> dict:
    names = list(tensors)
    canonical = {canonical_name(n) for n in names}
    prefixes = checkpoint.layer_prefixes(names)
    return {
        "layer_prefix": prefixes[0] if len(prefixes) == 1 else prefixes,
        "embed_tokens": "embed_tokens.weight" in canonical,
        "lm_head": "lm_head.weight" in canonical,
        "d2t": "d2t" in canonical,
        "t2d": "t2d" in canonical,
        "fc_norm_tensors": sum(1 for n in canonical if n.startswith("fc_norm.")),
        "files": len({info.file for info in tensors.values()}),
        "dtypes": dict(Counter(info.dtype for info in tensors.values())),
    }


def inspect_draft(draft: str, target: str | None = None, environ=os.environ) -> dict:
    """Everything the report says, as one JSON-ready dict; problems listed, never raised."""
    config = _read_config(draft)
    report: dict = {
        "draft": draft,
        "architecture": (config.get("architectures") or [None])[0],
        "model_type": config.get("model_type"),
        "mla": {k: config.get(k) for k in MLA_FIELDS},
        "flags": {
            "fc_norm": bool(config.get("fc_norm") or config.get("use_aux_norm")),
            "norm_output": bool(config.get("norm_output")),
            "norm_before_residual": bool(config.get("norm_before_residual")),
        },
        "problems": [],
    }
    try:
        theta = rope_override.requested_rope_theta(environ)
    except ValueError as err:
        theta = None
        report["problems"].append(str(err))
    report["rope_theta"] = {"config": rope_override.config_rope_theta(config),
                            "served": theta or rope_override.config_rope_theta(config),
                            "override": theta is not None}
    ids, source = written_ids(config)
    report["layer_ids"] = ids
    report["layer_ids_source"] = source
    target_config = _read_config(target) if target else {}
    layers = text_config_value(target_config, "num_hidden_layers")
    hidden = text_config_value(target_config, "hidden_size")
    vocab = text_config_value(target_config, "vocab_size")
    report["target"] = {"path": target, "num_hidden_layers": layers, "hidden_size": hidden,
                        "vocab_size": vocab}

    tensors = {}
    try:
        tensors = checkpoint.read_checkpoint(draft)
        report["layout"] = layout(tensors)
    except checkpoint.CheckpointError as err:
        report["problems"].append(str(err))
    try:
        spec = spec_from_config(config, source=os.path.join(draft, "config.json"))
        report["draft_vocab_size"] = spec.draft_vocab_size
        report["num_aux_hidden_states"] = spec.num_aux
        if tensors:
            report["problems"] += checkpoint.check_checkpoint(
                spec, tensors, target_vocab=vocab, target_hidden=hidden)
    except DraftConfigError as err:
        report["problems"].append(str(err))

    try:
        decision = resolve_layer_ids(
            config,
            layers,
            can_capture_after_last=vllm_compat.can_capture_after_last_layer(),
            fc_in_features=checkpoint.fc_in_features(tensors),
            layer_prefix=checkpoint.layer_prefix(tensors),
            target_hidden_size=hidden or config.get("target_hidden_size")
            or config.get("hidden_size"),
            environ=environ,
        )
        report["convention"] = decision.convention
        report["convention_reason"] = decision.reason
        report["convention_rule"] = decision.rule
        report["training_tool"] = decision.tool
        report["capture_ids"] = decision.capture_ids
        report["ambiguous"] = decision.ambiguous
        report["ambiguous_capture_ids"] = decision.ambiguous_with
        report["decision"] = decision.log_line()
    except LayerIdError as err:
        report["convention"] = None
        report["capture_ids"] = None
        report["problems"].append(str(err))
    return report


def format_report(report: dict) -> str:
    lines = [
        f"draft         {report['draft']}",
        f"architecture  {report['architecture']}  (model_type {report['model_type']})",
    ]
    if "layout" in report:
        lay = report["layout"]
        lines.append(
            f"layout        prefix {lay['layer_prefix']}, embed_tokens "
            f"{'own' if lay['embed_tokens'] else 'shared from target'}, lm_head "
            f"{'own' if lay['lm_head'] else 'shared from target'}, d2t {lay['d2t']}, "
            f"{lay['files']} file(s), dtypes {lay['dtypes']}"
        )
    lines.append(f"flags         {report['flags']}")
    rope = report["rope_theta"]
    lines.append(f"rope base     {rope['served']}" + (
        f" (from {rope_override.ROPE_THETA_ENV}; config.json says {rope['config']})"
        if rope["override"] else " (config.json)"))
    lines.append(f"MLA dims      {report['mla']}")
    if report.get("draft_vocab_size"):
        lines.append(f"vocabulary    draft {report['draft_vocab_size']}, "
                     f"captured states {report.get('num_aux_hidden_states')}")
    target = report["target"]
    lines.append(f"target        {target['path'] or '(not given: no range check)'}"
                 + (f", {target['num_hidden_layers']} layers" if target["num_hidden_layers"] else ""))
    lines.append(f"layer ids     {report['layer_ids']} ({report['layer_ids_source']})")
    if report.get("convention"):
        lines.append(f"trained with  {report['training_tool'] or 'unknown (no tool fingerprint)'}")
        lines.append(f"convention    {report['convention']} by rule {report['convention_rule']}"
                     f" ({report['convention_reason']})")
        lines.append(f"vLLM captures {report['capture_ids']}")
        if report["ambiguous"]:
            lines.append("AMBIGUOUS     " + ambiguity_advice(
                report["convention"], report["ambiguous_capture_ids"]))
    if report["problems"]:
        lines.append(f"PROBLEMS ({len(report['problems'])}):")
        lines += [f"  - {p}" for p in report["problems"]]
    else:
        lines.append("problems      none")
    return "\n".join(lines)
