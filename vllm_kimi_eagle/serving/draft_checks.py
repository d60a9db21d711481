"""The checks the speculative hook makes before an engine starts, each a refusal naming the
file and field (or the setting) where vLLM would otherwise serve a draft wrong or fail
only after loading its weights: the release's MLA attention, the checkpoint against its
config, a quantized draft on this platform, a k schedule."""

from __future__ import annotations

import json
import logging

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.draft import checkpoint, quantization
from vllm_kimi_eagle.draft.draft_config import DraftConfigError
from vllm_kimi_eagle.draft.draft_report import DraftReport
from vllm_kimi_eagle.draft.draft_source import DraftHeaders
from vllm_kimi_eagle.serving.draft_plan import DraftAtHand

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler


class ScheduleError(ValueError):
    """A k schedule vLLM would refuse once its scheduler starts."""


def check_release(report: DraftReport) -> None:
    """Refuse a draft this vLLM release would serve with part of it silently missing."""
    version = vllm_compat.installed_vllm_version()
    spec = report.spec
    gated = spec is not None and spec.output_gate
    if gated and not vllm_compat.has_release(version, vllm_compat.OUTPUT_GATE_FROM):
        raise DraftConfigError(
            f"{report.config.source}: mla_use_output_gate is true, but vLLM {version}'s MLA "
            "attention never applies an output gate (from "
            f"{vllm_compat.OUTPUT_GATE_FROM} it does): the draft would be served without "
            f"it, at lower acceptance. Serve it on vLLM {vllm_compat.OUTPUT_GATE_FROM} or "
            "newer.")


def check_checkpoint(draft: DraftAtHand, report: DraftReport, headers: DraftHeaders) -> None:
    """Raise if an MLA EAGLE3 draft would not serve as trained, whichever class serves it.

    Local folders, hub drafts in the HF cache and (online) hub drafts are checked from
    their safetensors headers (and a d2t's values where the file is at hand); when no
    header can be read the check is skipped with a log line: the plugin's class still
    checks every tensor while loading, vLLM's does not.
    """
    ours = report.choice.ours
    if ours and report.config_error is not None:
        raise report.config_error
    who = "the plugin's class" if ours else "vLLM's in-tree class"
    if headers.tensors is None:
        if ours:
            logger.info(
                "vllm-kimi-eagle: pre-serve checkpoint check of %s skipped: %s. Loading the "
                "weights still checks every tensor strictly.", draft.model, headers.where)
        else:
            logger.warning(
                "vllm-kimi-eagle: pre-serve checkpoint check of %s skipped: %s. vLLM's "
                "in-tree class serves it, and its loader checks no tensor: a missing one "
                "serves silently wrong. Run `vllm-kimi-eagle inspect %s` where the "
                "checkpoint is at hand.", draft.model, headers.where, draft.model)
        return
    problems = report.tensor_problems
    if problems:
        raise checkpoint.CheckpointError(
            f"the EAGLE3 MLA draft at {draft.model}, served by {who}, does not match its "
            f"config.json ({len(problems)} problem(s), read from the {headers.where}); vLLM "
            "would serve it with lower acceptance or fail later:\n  - "
            + "\n  - ".join(problems)
        )
    logger.info("vllm-kimi-eagle: draft checkpoint %s checked against its config "
                "(headers from the %s): no problem. Served by %s.", draft.model,
                headers.where, who)


class QuantizedDraftError(ValueError):
    """A quantized draft vLLM would not serve right on this platform."""


def check_quantization(draft: DraftAtHand, report: DraftReport) -> None:
    """Refuse, in one line naming the scheme, the platform and what to do, a quantized
    draft vLLM would fail to load or serve wrong here (``quantization.serving_problem``)."""
    from vllm.platforms import current_platform

    from vllm_kimi_eagle.cpu.cpu_mla_backend import amx_available

    config = report.config
    try:
        scheme = quantization.quantization_from_config(
            config.quantization_config, config.source, config.quantization_from)
    except quantization.QuantizationConfigError:
        return  # the report's config error says it
    if scheme is None:
        return
    on_cpu = bool(current_platform.is_cpu())
    problem = quantization.serving_problem(
        scheme, config.q_lora_rank, on_cpu=on_cpu, amx=on_cpu and amx_available(),
        dtype=draft.dtype, has_cpu_op=vllm_compat.has_cpu_op)
    if problem:
        platform = "vLLM's CPU build" if on_cpu else f"vLLM on {current_platform.device_name}"
        raise QuantizedDraftError(f"the quantized draft {draft.model} cannot be served right "
                                  f"on {platform}: {problem}.")
    if scheme.loads_in_plugin_class:
        logger.info("vllm-kimi-eagle: draft %s is %s; its scales are checked and loaded by "
                    "the plugin's class.", draft.model,
                    quantization.SCHEMES[scheme.scheme]["words"])


SCHEDULE_FIELD = "num_speculative_tokens_per_batch_size"


def check_schedule(spec_config) -> None:
    """Refuse now a k schedule that vLLM would refuse only when its scheduler starts, after
    the weights have loaded; warn where a k above num_speculative_tokens will be lowered."""
    schedule = getattr(spec_config, SCHEDULE_FIELD, None)
    validate = vllm_compat.dynamic_schedule_validator()
    if not schedule or validate is None:  # vLLM serves an empty schedule as none
        return
    try:
        ranges = validate(schedule)
    except (ValueError, TypeError) as err:
        raise ScheduleError(
            f"speculative config field {SCHEDULE_FIELD}={json.dumps(schedule, default=str)}: "
            f"{err} Give inclusive "
            "[start, end, k] batch-size ranges, the first starting at 1, e.g. [[1, 8, 3], "
            "[9, 1024, 0]]; `vllm-kimi-eagle bench-e2e --schedule` measures one.") from err
    k = spec_config.num_speculative_tokens
    above = sorted({each for *_, each in ranges if each > k})
    if above:
        logger.warning("vllm-kimi-eagle: %s asks for k=%s above num_speculative_tokens %d; "
                       "vLLM drafts %d tokens there.", SCHEDULE_FIELD, above, k, k)
