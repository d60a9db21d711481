"""What the plugin does when vLLM builds a speculative config.

Runs in the process that parses the arguments (API server, ``LLM(...)``), right after
vLLM has read and wrapped the draft's config, before an engine starts or a weight loads.
``on_speculative_config`` is the whole sequence:

1. for every speculative method, on the CPU build, one line says that vLLM's rejection
   sampler is mended (``cpu_sampler.py``; register() installed it in every process);
2. for EAGLE3 only: an MLA draft's positions are decided, NoPE or RoPE
   (``draft_positions.py``), and its safetensors headers are read (local folder, HF
   cache or hub metadata), for no other draft;
3. the draft's layer ids are resolved (``layer_ids.py``) and written to the draft
   config's top-level ``eagle_aux_hidden_state_layer_ids``, the one place every vLLM
   runner reads, so the engine captures the layers the draft was trained on;
4. a k schedule (``num_speculative_tokens_per_batch_size``) that vLLM would refuse only
   after loading the weights is refused;
5. with the plugin's draft class, the checkpoint is checked against its config (the class
   checks again while loading), a quantized draft this platform would not serve right is
   refused (``quantization.py``), and vLLM's proposer is told to use the class's greedy
   shortcut unless the user set the switch or vLLM rejects it (``shortcut_policy.py``).
How the MLA backend verifies draft tokens is logged by the engine, once it knows its
backend (``cpu_mla_verify.py``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import json
import logging
import os

from vllm_kimi_eagle import (
    checkpoint,
    cpu_mla_verify,
    cpu_sampler,
    quantization,
    shortcut_policy,
    vllm_compat,
)
from vllm_kimi_eagle.architectures import DRAFT_ENV, PLUGIN_DRAFT_ARCHITECTURES
from vllm_kimi_eagle.draft_positions import NOPE_KEY, decide_positions
from vllm_kimi_eagle.draft_report import DraftReport, draft_report
from vllm_kimi_eagle.draft_source import DraftHeaders, draft_headers
from vllm_kimi_eagle.layer_ids import explicit_convention
from vllm_kimi_eagle.patching import wrap_method
from vllm_kimi_eagle.shortcut_policy import FLAG

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
# Target model types whose drafts get the layer-id handling without being asked.
# Kimi-K3 (kimi_k3, vLLM 0.27 on) captures in vLLM's convention too: id N is the running
# state once layer N-1 has completed (models/kimi_k3 _capture_aux_hidden_stream).
KIMI_DEEPSEEK_TARGETS = frozenset(
    {"kimi_k2", "kimi_k25", "kimi_k3", "deepseek_v2", "deepseek_v3", "deepseek_v32"}
)
# Set on the draft's hf_config once resolved: the ids are never shifted twice.
RESOLVED_MARK = "vllm_kimi_eagle_layer_ids"
# Names of the fields the user passed to the SpeculativeConfig being built (None: unknown).
_USER_GIVEN: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "vllm_kimi_eagle_user_given", default=None
)


@functools.lru_cache(maxsize=8)
def _cached_headers(model: str, revision: str | None) -> DraftHeaders:
    return draft_headers(model, revision)


def _headers(draft) -> DraftHeaders:
    """The draft's safetensors headers, read once per process and draft."""
    return _cached_headers(draft.model, getattr(draft, "revision", None))


def is_mla_draft(spec_config) -> bool:
    """The draft's architecture is one of the MLA EAGLE3 drafts the plugin knows."""
    return bool(PLUGIN_DRAFT_ARCHITECTURES
                & set(spec_config.draft_model_config.architectures or ()))


def headers_for(spec_config) -> DraftHeaders:
    """The draft's safetensors headers, read only for the MLA drafts the plugin knows
    (their layer prefix tells the training tool; their tensors are checked): nothing is
    read, locally or from the hub, for any other draft."""
    if not is_mla_draft(spec_config):
        return DraftHeaders(None, "not read: not an MLA EAGLE3 draft")
    return _headers(spec_config.draft_model_config)


def report_for(spec_config, headers: DraftHeaders) -> DraftReport:
    """What vLLM will make of this draft: the report ``inspect`` prints, from the configs
    vLLM has read and the draft's headers."""
    draft, target = spec_config.draft_model_config, spec_config.target_model_config
    report = draft_report(
        draft.hf_config,
        headers.tensors,
        source=os.path.join(draft.model, "config.json"),
        target_layers=vllm_compat.total_layers(target),
        target_hidden=target.get_hidden_size(),
        target_vocab=target.get_vocab_size(),
        can_capture_after_last=vllm_compat.can_capture_after_last_layer(),
    )
    return report


def handles_layer_ids(spec_config) -> bool:
    """Kimi and DeepSeek targets, or a draft whose config names its convention; once."""
    hf_config = spec_config.draft_model_config.hf_config
    if getattr(hf_config, RESOLVED_MARK, None):
        return False
    target_type = getattr(spec_config.target_model_config.hf_config, "model_type", None)
    asked, _ = explicit_convention(hf_config)
    return target_type in KIMI_DEEPSEEK_TARGETS or bool(asked)


def apply_positions(spec_config, ours: bool) -> None:
    """NoPE or RoPE for a Kimi-K3 draft (``draft_positions.py``), written to the draft
    config as ``mla_use_nope`` for the plugin's class; said where vLLM's class ignores it."""
    hf_config = spec_config.draft_model_config.hf_config
    decision = decide_positions(hf_config)
    if not ours:
        if decision.written:
            logger.warning("vllm-kimi-eagle: the draft config sets %s, which vLLM's in-tree "
                           "draft class (%s=upstream) ignores: it rotates the rope dims.",
                           NOPE_KEY, DRAFT_ENV)
        return
    setattr(hf_config, NOPE_KEY, decision.nope)
    if decision.written or decision.nope:
        log = logger.warning if decision.ambiguous else logger.info
        log("vllm-kimi-eagle: %s", decision.log_line())


def apply_layer_ids(spec_config, report: DraftReport) -> None:
    """Write the resolved layer ids where vLLM's runners read them."""
    hf_config = spec_config.draft_model_config.hf_config
    if report.layer_id_error is not None:
        raise report.layer_id_error
    decision = report.decision
    hf_config.eagle_aux_hidden_state_layer_ids = list(decision.capture_ids)
    setattr(hf_config, RESOLVED_MARK, {"written": decision.written,
                                        "convention": decision.convention,
                                        "rule": decision.rule, "tool": decision.tool})
    log = logger.warning if decision.ambiguous else logger.info
    log("vllm-kimi-eagle: %s", decision.log_line())


def check_checkpoint(spec_config, report: DraftReport, headers: DraftHeaders) -> None:
    """Raise if an MLA EAGLE3 draft would not serve as trained.

    Local folders, hub drafts in the HF cache and (online) hub drafts are checked from
    their safetensors headers; when no header can be read the check is skipped with a
    log line, and the draft class still checks every tensor while loading.
    """
    draft = spec_config.draft_model_config
    if report.config_error is not None:
        raise report.config_error
    if headers.tensors is None:
        logger.info(
            "vllm-kimi-eagle: pre-serve checkpoint check of %s skipped: %s. Loading the "
            "weights still checks every tensor strictly.", draft.model, headers.where)
        return
    problems = report.tensor_problems
    if problems:
        raise checkpoint.CheckpointError(
            f"the EAGLE3 MLA draft at {draft.model} does not match its config.json "
            f"({len(problems)} problem(s), read from the {headers.where}); vLLM would serve "
            "it with lower acceptance or fail later:\n  - " + "\n  - ".join(problems)
        )
    logger.info("vllm-kimi-eagle: draft checkpoint %s checked against its config "
                "(headers from the %s): no problem.", draft.model, headers.where)


class QuantizedDraftError(ValueError):
    """A quantized draft vLLM would not serve right on this platform."""


def check_quantization(spec_config, report: DraftReport) -> None:
    """Refuse, in one line naming the scheme, the platform and what to do, a quantized
    draft vLLM would fail to load or serve wrong here (``quantization.serving_problem``)."""
    from vllm.platforms import current_platform

    from vllm_kimi_eagle.cpu_mla_backend import amx_available

    spec = report.spec
    if spec is None or spec.quantization is None:
        return
    draft = spec_config.draft_model_config
    on_cpu = bool(current_platform.is_cpu())
    problem = quantization.serving_problem(
        spec.quantization, spec.q_lora_rank, on_cpu=on_cpu, amx=on_cpu and amx_available(),
        dtype=str(draft.dtype).removeprefix("torch."))
    if problem:
        platform = "vLLM's CPU build" if on_cpu else f"vLLM on {current_platform.device_name}"
        raise QuantizedDraftError(f"the quantized draft {draft.model} cannot be served right "
                                  f"on {platform}: {problem}.")
    logger.info("vllm-kimi-eagle: draft %s is %s; its scales are checked and loaded by the "
                "plugin's class.", draft.model,
                quantization.SCHEMES[spec.quantization.scheme]["words"])


def apply_greedy_shortcut(spec_config) -> None:
    """Let vLLM's proposer call our draft's get_top_tokens where nothing forbids it.

    The decision (shortcut_policy.decide) keeps a value the user gave and every setting
    vLLM rejects the flag with; one INFO line says what it decided and why.
    """
    if not hasattr(spec_config, FLAG):
        return  # this vLLM has no local-argmax switch
    settings = {name: getattr(spec_config, name, None)
                for name in (FLAG, *(c[0] for c in vllm_compat.LOCAL_ARGMAX_CONFLICTS))}
    decision = shortcut_policy.decide(settings, _USER_GIVEN.get())
    if decision.changed:
        setattr(spec_config, FLAG, decision.use)
    logger.info("vllm-kimi-eagle: %s", decision.log_line())


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
        raise ValueError(
            f"speculative config field {SCHEDULE_FIELD}={json.dumps(schedule, default=str)}: "
            f"{err} Give inclusive "
            "[start, end, k] batch-size ranges, the first starting at 1, e.g. [[1, 8, 3], "
            "[9, 1024, 0]]; `vllm-kimi-eagle bench-e2e --schedule` measures one.") from err
    k = spec_config.num_speculative_tokens
    above = sorted({each for *_, each in ranges if each > k})
    if above:
        logger.warning("vllm-kimi-eagle: %s asks for k=%s above num_speculative_tokens %d; "
                       "vLLM drafts %d tokens there.", SCHEDULE_FIELD, above, k, k)


def announce_cpu_mends() -> None:
    """On the CPU build, say what the plugin mended for verification: the rejection
    sampler, for every speculative method (EAGLE, MTP, ngram, draft models all verify
    through it), and where the MLA backends' prefill path was asked for."""
    for line in (cpu_sampler.log_line(cpu_sampler.install_cpu_sampler()),
                 cpu_mla_verify.off_line()):
        if line:
            logger.info("vllm-kimi-eagle: %s", line)


def is_eagle3(spec_config) -> bool:
    return (getattr(spec_config, "method", None) == "eagle3"
            and spec_config.draft_model_config is not None
            and spec_config.target_model_config is not None)


def on_speculative_config(spec_config, ours: bool) -> None:
    """Everything the plugin does to a freshly built SpeculativeConfig, in order."""
    announce_cpu_mends()
    if not is_eagle3(spec_config):
        return
    if is_mla_draft(spec_config):
        apply_positions(spec_config, ours)
    ours = ours and is_mla_draft(spec_config)  # served by the plugin's class
    headers = headers_for(spec_config)
    report = report_for(spec_config, headers)
    if handles_layer_ids(spec_config):
        apply_layer_ids(spec_config, report)
    check_schedule(spec_config)
    if ours:
        check_checkpoint(spec_config, report, headers)
        check_quantization(spec_config, report)
        apply_greedy_shortcut(spec_config)


def given_field_names(cls, args: tuple, kwargs: dict) -> frozenset[str]:
    """Names of the dataclass fields a constructor call sets (positional ones included)."""
    positional = [f.name for f in dataclasses.fields(cls) if f.init][: len(args)]
    return frozenset(positional) | frozenset(kwargs)


def install_speculative_hook(ours: bool) -> bool:
    """Call on_speculative_config at the end of SpeculativeConfig.__post_init__.

    ``ours``: the plugin's draft class serves the MLA drafts (checkpoint checks and the
    greedy shortcut apply to it only). SpeculativeConfig.__init__ is wrapped too, only to
    note which fields the caller set: vLLM builds it from the user's speculative config
    (engine/arg_utils.py `SpeculativeConfig(**self.speculative_config)`, 0.28-0.33), so
    an explicit ``"use_local_argmax_reduction": false`` is told apart from the default.
    """

    def make_post_init(original):
        def __post_init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            on_speculative_config(self, ours)

        return __post_init__

    def make_init(original):
        def __init__(self, *args, **kwargs):
            token = _USER_GIVEN.set(given_field_names(type(self), args, kwargs))
            try:
                original(self, *args, **kwargs)
            finally:
                _USER_GIVEN.reset(token)

        return __init__

    noted = wrap_method(
        vllm_compat.SPECULATIVE_CONFIG,
        "__init__",
        make_init,
        "the plugin cannot tell a speculative config's explicit "
        "use_local_argmax_reduction from vLLM's default, so it leaves the flag alone.",
    )
    hooked = wrap_method(
        vllm_compat.SPECULATIVE_CONFIG,
        "__post_init__",
        make_post_init,
        "draft layer ids are used as written and checkpoints are checked only while "
        "their weights load.",
    )
    return noted and hooked
