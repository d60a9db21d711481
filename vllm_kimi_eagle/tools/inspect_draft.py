"""``vllm-kimi-eagle inspect DRAFT [--target TARGET] [--json]``: what vLLM will make of a draft.

DRAFT and TARGET are folders or hub ids (``tools/models/model_source.py``). Reads
config.json files and safetensors headers only (no weights, no vLLM engine), through the
same report the runtime acts on (``draft_report.py``), and reports the draft's layout,
MLA dimensions, layer ids and the convention decision, and every problem that would stop
serving or cost acceptance. Run it when acceptance is lower than expected.
"""

from __future__ import annotations

import os
from collections import Counter

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.compat import release_gate, vllm_compat
from vllm_kimi_eagle.draft import checkpoint, rope_override
from vllm_kimi_eagle.draft.draft_class import Needs, asked_class, in_tree_gaps
from vllm_kimi_eagle.draft.draft_config import (
    DraftConfigError,
    load_config_json,
    parse_draft_config,
)
from vllm_kimi_eagle.draft.draft_report import draft_report
from vllm_kimi_eagle.draft.draft_source import draft_headers, is_local
from vllm_kimi_eagle.draft.draft_spec import canonical_name
from vllm_kimi_eagle.draft.layer_ids import ambiguity_advice
from vllm_kimi_eagle.tools.models import model_source
from vllm_kimi_eagle.tools.models.config_access import text_config_value

MLA_FIELDS = ("hidden_size", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size")


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


def read_headers(draft: str, revision: str | None) -> tuple[dict | None, str, str | None]:
    """The draft's tensors, where they were read, and a problem if a local checkpoint
    cannot be read (a hub draft whose headers are out of reach is a note, not a problem:
    serving reads them the same way and loading checks every tensor)."""
    try:
        headers = draft_headers(draft, revision)
    except checkpoint.CheckpointError as err:
        return None, "local folder", str(err)
    if headers.tensors is None and is_local(draft):
        return None, headers.where, f"{headers.where}; a draft checkpoint is one " \
            f"model.safetensors or shards listed in {checkpoint.INDEX_FILE}."
    return headers.tensors, headers.where, None


TARGET_FIELDS = ("num_hidden_layers", "hidden_size", "vocab_size")


def target_facts(target_config: dict, path: str | None) -> tuple[dict, list[str]]:
    """The target's layers, hidden size and vocabulary (from ``text_config`` where the
    top level lacks them), each a positive integer, or a problem naming the field."""
    facts, problems = {}, []
    for field in TARGET_FIELDS:
        value = text_config_value(target_config, field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value <= 0):
            problems.append(f"{path}/config.json: field {field!r} is {value!r}; expected a "
                            "positive integer. Give --target the model's own config.json.")
            value = None
        facts[field] = value
    return facts, problems


def inspect_draft(draft: str, target: str | None = None, environ=os.environ, *,
                  revision: str | None = None, target_revision: str | None = None) -> dict:
    """Everything the report says, as one JSON-ready dict; problems listed, never raised.

    ``draft`` and ``target`` are folders, ids in the Hugging Face cache or hub ids
    (config.json and safetensors headers only: no weights are fetched). A model that
    cannot be found raises ModelNotFound. A config.json that cannot be parsed is the one
    problem reported.
    """
    draft_folder = model_source.resolve(draft, revision, role="draft",
                                        files=model_source.CONFIG_FILES)
    target_config = {}
    if target:
        target_config = model_source.read_config(model_source.resolve(
            target, target_revision, role="--target", files=model_source.CONFIG_FILES),
            "--target")
    report: dict = {"draft": draft, "draft_folder": draft_folder.folder,
                    "found_in": draft_folder.where, "problems": settings.problems(environ)}
    path = os.path.join(draft_folder.folder, "config.json")
    try:
        config = parse_draft_config(load_config_json(path), path)
    except DraftConfigError as err:
        report["problems"].append(str(err))
        report["config_error"] = str(err)
        return report
    verdict = release_gate.installed_verdict(environ)
    facts, target_problems = target_facts(target_config, target)
    report["problems"] += target_problems
    report.update({
        "architecture": config.architecture,
        "model_type": config.model_type,
        "mla": {k: getattr(config, k) for k in MLA_FIELDS},
    })
    ids, source = config.written_ids
    report["layer_ids"] = ids
    report["layer_ids_source"] = source
    layers, hidden, vocab = (facts[k] for k in TARGET_FIELDS)
    report["target"] = {"path": target, "num_hidden_layers": layers, "hidden_size": hidden,
                        "vocab_size": vocab}

    tensors, report["headers_from"], header_error = read_headers(draft, revision)
    if tensors:
        report["layout"] = layout(tensors)
    found = draft_report(
        config, tensors,
        target_layers=layers, target_hidden=hidden, target_vocab=vocab,
        can_capture_after_last=vllm_compat.can_capture_after_last_layer(),
        header_error=header_error, environ=environ, asked=asked_class(environ, verdict.act),
        contract=release_gate.contract_problems_here(),
        release=vllm_compat.installed_vllm_version(),
    )
    report["problems"] += found.problems
    report["notes"] = found.notes
    report["head_note"] = found.head_note
    report["served_by"] = {"class": "plugin" if found.choice.ours else "vllm",
                           "why": found.choice.why,
                           "refused": found.choice.refusal is not None}
    asked = rope_override.requested_rope_theta(environ)
    report["rope_theta"] = {"config": config.config_rope_theta, "served": found.rope_theta,
                            "override": asked is not None}
    report["rope"] = {"type": config.rope.kind, "read_from": config.rope.block or None,
                      "served": config.rope.words()}
    if found.spec is not None:
        spec = found.spec
        report["flags"] = {"fc_norm": spec.fc_norm, "norm_output": spec.norm_output,
                           "norm_before_residual": spec.norm_before_residual}
        report["draft_vocab_size"] = spec.draft_vocab_size
        report["num_aux_hidden_states"] = spec.num_aux
        report["attention"] = attention_facts(found)
        report["in_tree_class"] = in_tree_gaps(Needs(
            config, found.positions, tuple(tensors or ()), vllm_compat.installed_vllm_version()))
    decision = found.decision
    report["convention"] = decision.convention if decision else None
    report["capture_ids"] = decision.capture_ids if decision else None
    if decision:
        report["convention_reason"] = decision.reason
        report["convention_rule"] = decision.rule
        report["training_tool"] = decision.tool
        report["ambiguous"] = decision.ambiguous
        report["ambiguous_capture_ids"] = decision.ambiguous_with
        report["decision"] = decision.log_line()
    return report


def attention_facts(found) -> dict:
    """How the plugin serves the draft's attention: positions, gate, norms, quantization."""
    positions, spec = found.positions, found.spec
    return {"positions": "NoPE" if positions.nope else "RoPE",
            "positions_reason": positions.reason, "positions_ambiguous": positions.ambiguous,
            "positions_line": positions.log_line(), "output_gate": spec.output_gate,
            "hidden_norm": spec.hidden_norm, "final_norm": spec.final_norm,
            "quantization": spec.quantization and (
                spec.quantization.scheme if spec.quantization.loads_in_plugin_class
                else spec.quantization.words)}


def format_report(report: dict) -> str:
    found = ("" if report["found_in"] == "local folder"
             else f" ({report['found_in']}: {report['draft_folder']})")
    lines = [f"draft         {report['draft']}{found}"]
    if "config_error" in report:
        return "\n".join(lines + [f"PROBLEMS ({len(report['problems'])}):"]
                         + [f"  - {p}" for p in report["problems"]])
    lines.append(f"architecture  {report['architecture']}  (model_type {report['model_type']})")
    if "layout" in report:
        lay = report["layout"]
        lines.append(
            f"layout        prefix {lay['layer_prefix']}, embed_tokens "
            f"{'own' if lay['embed_tokens'] else 'shared from target'}, lm_head "
            f"{'own' if lay['lm_head'] else 'shared from target'}, d2t {lay['d2t']}, "
            f"{lay['files']} file(s), dtypes {lay['dtypes']} (headers from the "
            f"{report['headers_from']})"
        )
    elif not report["problems"] or report["headers_from"] != "local folder":
        lines.append(f"tensors       not checked: {report['headers_from']} (loading the "
                     "weights checks every tensor)")
    if "flags" in report:
        lines.append(f"flags         {report['flags']}")
    lines.append(f"rope          {report['rope']['served']}")
    rope = report["rope_theta"]
    lines.append(f"rope base     {rope['served']}" + (
        f" (from {rope_override.ROPE_THETA_ENV}; config.json says {rope['config']})"
        if rope["override"] else " (config.json)"))
    lines.append(f"MLA dims      {report['mla']}")
    attention = report.get("attention")
    if attention:
        lines.append(f"attention     {attention['positions']} ({attention['positions_reason']})"
                     f", output gate {attention['output_gate']}, hidden_norm "
                     f"{attention['hidden_norm']}, final norm {attention['final_norm']}"
                     + (f", quantized {attention['quantization']}"
                        if attention["quantization"] else ""))
        if attention["positions_ambiguous"]:
            lines.append("AMBIGUOUS     " + attention["positions_line"].split("AMBIGUOUS: ")[1])
    served = report["served_by"]
    who = "the plugin's draft class" if served["class"] == "plugin" else "vLLM's in-tree class"
    lines.append(f"served by     {'(refused) ' if served['refused'] else ''}{who}: "
                 f"{served['why']}")
    for gap in report.get("in_tree_class", ()):
        lines.append(f"vLLM's class  {gap}")
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
    lines += [f"note          {note} (vLLM's class reads the config its own way)"
              for note in report.get("notes", ())]
    if report.get("head_note"):
        lines.append(f"note          {report['head_note']}")
    if report["problems"]:
        lines.append(f"PROBLEMS ({len(report['problems'])}):")
        lines += [f"  - {p}" for p in report["problems"]]
    else:
        lines.append("problems      none")
    return "\n".join(lines)
