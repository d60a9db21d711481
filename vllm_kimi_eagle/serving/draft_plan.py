"""What the speculative hook reads before it acts: vLLM's speculative config as plain
values (``DraftAtHand``), and for an EAGLE3 draft the plugin acts on, its config.json and
safetensors headers, read once, in the report ``inspect`` prints (``Plan``).

Runs where vLLM builds its config (``speculative_hook.py`` calls ``draft_at_hand`` and
``plan_for``); nothing here changes vLLM's objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.draft.architectures import PLUGIN_DRAFT_ARCHITECTURES
from vllm_kimi_eagle.draft.draft_config import DraftConfigError, parse_draft_config
from vllm_kimi_eagle.draft.draft_report import DraftReport, draft_report
from vllm_kimi_eagle.draft.draft_source import DraftHeaders, draft_config_json, draft_headers
from vllm_kimi_eagle.draft.served_draft import CHANNEL

# Target model types whose drafts get the layer-id handling without being asked.
# Kimi-K3 (kimi_k3, vLLM 0.27 on) captures in vLLM's convention too: id N is the running
# state once layer N-1 has completed (models/kimi_k3/nvidia/model.py: inline in forward in
# 0.27, _capture_aux_hidden_stream from 0.28).
KIMI_DEEPSEEK_TARGETS = frozenset(
    {"kimi_k2", "kimi_k25", "kimi_k3", "deepseek_v2", "deepseek_v3", "deepseek_v32"}
)
_HEADERS: dict[tuple[str, str | None], DraftHeaders] = {}


def _cached_headers(model: str, revision: str | None) -> DraftHeaders:
    """The draft's headers, read once per process and draft; a read that found none (the
    hub unreachable, say) is not kept, so the next speculative config tries again."""
    key = (model, revision)
    if key not in _HEADERS:
        headers = draft_headers(model, revision)
        if headers.tensors is None:
            return headers
        _HEADERS[key] = headers
    return _HEADERS[key]


@dataclass(frozen=True)
class DraftAtHand:
    """What the hook reads off vLLM's speculative config, once, as plain values."""

    model: str
    revision: str | None
    mla: bool  # one of the MLA EAGLE3 architectures the plugin knows
    asked: str  # draft_class.asked_class, as register() read it: "plugin" or "upstream"
    kimi_target: bool  # a Kimi or DeepSeek target: layer ids handled unasked
    target_layers: int
    target_hidden: int
    target_vocab: int
    dtype: str
    max_positions: int | None  # vLLM's max_position_embeddings for the draft
    hf_config: object  # vLLM's draft config object, which the hook writes to
    decided: bool  # the hook has run for this draft config already

    @property
    def asked_here(self) -> str:
        """The class asked for this draft: the plugin registers its class for the MLA
        architectures it knows only; any other is vLLM's, as without the plugin."""
        return self.asked if self.mla else "upstream"

    @property
    def asked_ours(self) -> bool:
        return self.asked_here == "plugin"


def draft_at_hand(spec_config, asked: str) -> DraftAtHand:
    """``asked``: draft_class.asked_class, as register() read it."""
    draft, target = spec_config.draft_model_config, spec_config.target_model_config
    mla = bool(PLUGIN_DRAFT_ARCHITECTURES & set(draft.architectures or ()))
    return DraftAtHand(
        draft.model, getattr(draft, "revision", None), mla, asked,
        getattr(target.hf_config, "model_type", None) in KIMI_DEEPSEEK_TARGETS,
        vllm_compat.total_layers(target), target.get_hidden_size(), target.get_vocab_size(),
        str(draft.dtype).removeprefix("torch."),
        getattr(draft.hf_config, "max_position_embeddings", None), draft.hf_config,
        decided_here(draft.hf_config))


def decided_here(hf_config) -> bool:
    """Whether the hook has attached its decisions to this draft config: the attribute on
    vLLM's config object and not on the config it wraps (read from config.json, which the
    record refuses where it carries the attribute)."""
    inner = getattr(hf_config, "model", None)
    return getattr(hf_config, CHANNEL, None) is not None and \
        getattr(inner, CHANNEL, None) is None


@dataclass(frozen=True)
class Plan:
    """What the hook does for one draft: its report, or why it leaves the draft alone."""

    report: DraftReport | None  # None: the plugin does not act on this draft
    headers: DraftHeaders | None
    acts_on_ids: bool = False
    why_not: str = ""


def plan_for(draft: DraftAtHand, contract: tuple[str, ...] = (),
             release: Version | None = None) -> Plan:
    """Read the draft's config.json once (folder, Hugging Face cache, or as vLLM read it)
    and, for the MLA drafts the plugin knows, its safetensors headers; report (with
    ``contract``: where this vLLM breaks what the plugin's class builds on). Drafts the
    plugin does not act on (another target's, served by vLLM's class, stating no
    convention) are vLLM's to judge, a malformed config.json included."""
    found = draft_config_json(draft.model, draft.revision)
    if found is None:
        inner = getattr(draft.hf_config, "model", None) or draft.hf_config
        found = inner.to_dict(), f"{draft.model} config.json (as vLLM read it)"
    try:
        config = parse_draft_config(*found)
    except DraftConfigError as err:
        if draft.kimi_target or draft.asked_ours:
            raise
        return Plan(None, None, why_not=str(err))
    # Headers only for the MLA drafts the plugin knows: nothing is read, locally or from
    # the hub, for any other draft.
    headers = DraftHeaders(None, "not read: not an MLA EAGLE3 draft")
    if draft.mla:
        headers = _cached_headers(draft.model, draft.revision)
    report = draft_report(
        config, headers.tensors, target_layers=draft.target_layers,
        target_hidden=draft.target_hidden, target_vocab=draft.target_vocab,
        can_capture_after_last=vllm_compat.can_capture_after_last_layer(),
        asked=draft.asked_here, contract=contract, release=release)
    acts_on_ids = draft.kimi_target or report.states_convention
    if not (draft.asked_ours or acts_on_ids):
        return Plan(None, None, why_not="not a Kimi or DeepSeek target's draft")
    return Plan(report, headers, acts_on_ids)
