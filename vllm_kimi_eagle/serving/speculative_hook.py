"""What the plugin does when vLLM builds a speculative config.

Runs in the process that parses the arguments (API server, ``LLM(...)``), right after
vLLM has read and wrapped the draft's config, before an engine starts or a weight loads.
``on_speculative_config`` is the whole sequence:

1. for every speculative method, on the CPU build, one line says that vLLM's rejection
   sampler is mended (``cpu_sampler.py``; register() installed it in every process);
2. for EAGLE3 drafts the plugin acts on (Kimi and DeepSeek targets, the plugin's MLA
   drafts, a draft that states its layer-id convention), the draft's config.json is read
   and validated once (``draft_config.py``), with its safetensors headers for the MLA
   drafts only, into the report ``inspect`` prints (``draft_plan.py``, ``draft_report.py``):
   the spec, the layer ids (``layer_ids.py``), NoPE or RoPE (``draft_positions.py``), the
   rope;
3. the capture ids are written to the draft config's top-level
   ``eagle_aux_hidden_state_layer_ids``, the one place every vLLM runner reads, and the
   decisions the draft class needs travel with the draft's config (``served_draft.py``);
4. a k schedule (``num_speculative_tokens_per_batch_size``) that vLLM would refuse only
   after loading the weights is refused (``draft_checks.py``, as the checks below);
5. a draft the plugin's class cannot serve here (a quantization it does not load, a vLLM
   whose internals moved) is given the name of vLLM's class, with one line, unless vLLM's
   class would serve it wrong (``draft_class.py``); vLLM's class asked for
   (``VLLM_KIMI_EAGLE_DRAFT=upstream``) is refused where it cannot load the draft, and
   warned about where it computes otherwise than trained;
6. whichever class serves it, the checkpoint is checked against its config (the
   plugin's class checks again while loading, vLLM's never does); with the plugin's
   class, a quantized draft this platform would not serve right is refused
   (``quantization.py``), and vLLM's proposer is told to use the class's greedy shortcut
   unless the user set the switch or vLLM rejects it (``shortcut_policy.py``).
A draft that cannot be served right stops here with one error naming the file and field;
anything else that goes wrong here is the plugin's fault and says so (``PluginHookError``).
How the MLA backend verifies draft tokens is logged by the engine, once it knows its
backend (``cpu_mla_verify.py``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.compat import release_gate, vllm_compat
from vllm_kimi_eagle.compat.patching import wrap_method
from vllm_kimi_eagle.cpu import cpu_mla_verify, cpu_sampler
from vllm_kimi_eagle.draft import checkpoint, rope_override
from vllm_kimi_eagle.draft.architectures import IN_TREE_ALIAS
from vllm_kimi_eagle.draft.draft_class import DraftClassError
from vllm_kimi_eagle.draft.draft_config import DraftConfigError, parse_draft_config
from vllm_kimi_eagle.draft.draft_report import DraftReport
from vllm_kimi_eagle.draft.draft_source import draft_config_json
from vllm_kimi_eagle.draft.layer_ids import LayerIdError
from vllm_kimi_eagle.serving import plan_metric, shortcut_policy
from vllm_kimi_eagle.serving.draft_checks import (
    QuantizedDraftError,
    ScheduleError,
    check_checkpoint,
    check_quantization,
    check_release,
    check_schedule,
)
from vllm_kimi_eagle.serving.draft_plan import DraftAtHand, Plan, draft_at_hand, plan_for
from vllm_kimi_eagle.serving.shortcut_policy import FLAG

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
# Names of the fields the user passed to the SpeculativeConfig being built (None: unknown).
_USER_GIVEN: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "vllm_kimi_eagle_user_given", default=None
)


class DraftRefusedError(Exception):
    """The plugin refuses to serve a draft as configured; the message names the file and
    the field. Not a ValueError, so that pydantic (SpeculativeConfig is a pydantic
    dataclass) passes it on as it is instead of wrapping it in a ValidationError."""


class PluginHookError(RuntimeError):
    """Something failed inside the plugin's hook that says nothing about the draft."""


def announce(draft: DraftAtHand, report: DraftReport) -> None:
    """The report's lines on the draft's positions and layer ids, where they matter."""
    rope = report.config.rope
    if rope.original_max_filled:
        logger.info("vllm-kimi-eagle: the draft's rope is served as %s.", rope.words())
    positions = report.positions
    if not report.choice.ours and report.notes:
        logger.warning("vllm-kimi-eagle: vLLM's in-tree class serves the draft %s (%s), and "
                       "serves it otherwise than its config.json says: %s", draft.model,
                       report.choice.why, " ".join(report.notes))
    if report.head_note:
        log = logger.warning if "very likely" in report.head_note else logger.info
        log("vllm-kimi-eagle: %s: %s.", draft.model, report.head_note)
    if report.choice.ours and (positions.written or positions.nope):
        log = logger.warning if positions.ambiguous else logger.info
        log("vllm-kimi-eagle: %s", report.positions_line)


def apply_layer_ids(draft: DraftAtHand, report: DraftReport) -> None:
    """Write the resolved layer ids where vLLM's runners read them."""
    if report.layer_id_error is not None:
        raise report.layer_id_error
    decision = report.decision
    draft.hf_config.eagle_aux_hidden_state_layer_ids = list(decision.capture_ids)
    log = logger.warning if decision.ambiguous else logger.info
    log("vllm-kimi-eagle: %s", report.layer_ids_line)


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


def on_speculative_config(spec_config, asked: str) -> None:
    """Everything the plugin does to a freshly built SpeculativeConfig, in order."""
    announce_cpu_mends()
    if not is_eagle3(spec_config):
        return
    draft = draft_at_hand(spec_config, asked)
    if draft.decided:  # vLLM builds the speculative config again around the same draft
        return
    # On a vLLM minor not checked on: whether the plugin's class fits it (read once here,
    # where a draft is built; draft_class_entry.py reads the same in the worker).
    contract = release_gate.contract_problems_here() if draft.asked_ours else ()
    plan = plan_for(draft, contract, vllm_compat.installed_vllm_version())
    apply_plan(spec_config, draft, plan)


def hand_to_vllm(spec_config, draft: DraftAtHand, report: DraftReport) -> None:
    """Give the draft the architecture name registered to vLLM's class (the worker builds
    the class its hf_config names), and say so in one line."""
    report.choice.refuse()
    draft.hf_config.architectures = [IN_TREE_ALIAS]
    if not vllm_compat.refresh_draft_architecture(spec_config):
        logger.info("vllm-kimi-eagle: this vLLM has no SpeculativeConfig.update_arch_: the "
                    "architecture it cached for the draft keeps the old name in its log; "
                    "its worker builds the class the draft's config names, %s.", IN_TREE_ALIAS)
    logger.info("vllm-kimi-eagle: %s.", report.choice.line(draft.model))


def apply_plan(spec_config, draft: DraftAtHand, plan: Plan) -> None:
    """Act on the plan: log, refuse, write the capture ids, check and hand over."""
    report = plan.report
    if report is None:
        logger.debug("vllm-kimi-eagle: leaves the draft %s to vLLM: %s", draft.model,
                     plan.why_not)
        check_schedule(spec_config)
        return
    announce(draft, report)
    if plan.acts_on_ids:
        apply_layer_ids(draft, report)
    check_schedule(spec_config)
    if draft.asked_ours and not report.choice.ours:
        hand_to_vllm(spec_config, draft, report)
    report.choice.refuse()  # vLLM's class asked for where it cannot load the draft
    if report.choice.ours:
        check_release(report)
    # Every route: the checkpoint against its config, whichever class loads it.
    check_checkpoint(draft, report, plan.headers)
    if not report.choice.ours:  # the plugin's class applies it where it serves
        rope_override.serve_rope_theta(draft.hf_config, report.rope_theta,
                                       report.config.config_rope_theta, logger)
    check_quantization(draft, report)
    if report.choice.ours:
        apply_greedy_shortcut(spec_config)
    report.served(draft.max_positions, getattr(spec_config, FLAG, None)).attach(
        draft.hf_config)
    plan_metric.records_folder()  # where the workers' self-checks leave what they read


# The errors that are a verdict on the user's draft or settings, each naming the field.
REFUSALS = (DraftConfigError, LayerIdError, checkpoint.CheckpointError, QuantizedDraftError,
            ScheduleError, DraftClassError)


def guarded(spec_config, asked: str) -> None:
    """on_speculative_config, where an error that is not a verdict on the draft names
    itself as the plugin's, with the vLLM release and the way to serve without it."""
    try:
        on_speculative_config(spec_config, asked)
    except REFUSALS as err:
        raise DraftRefusedError(str(err)) from None
    except Exception as err:
        raise PluginHookError(
            f"vllm-kimi-eagle failed inside its speculative-config hook on vLLM "
            f"{vllm_compat.installed_vllm_version()} ({type(err).__name__}: {err}). This is a "
            "fault of the plugin, not a verdict on your draft: please report it with your "
            f"vLLM version; {settings.PLUGIN.name}=0 serves without the plugin.") from err


def diagnosis(kwargs: dict) -> DraftConfigError | None:
    """Why an EAGLE3 draft's config.json is malformed, where it is: vLLM (transformers)
    may refuse such a file before the hook runs, naming the field but not the file."""
    if kwargs.get("method") != "eagle3" or not isinstance(kwargs.get("model"), str):
        return None
    try:
        found = draft_config_json(kwargs["model"], kwargs.get("revision"))
        if found is not None:
            parse_draft_config(*found)
    except DraftConfigError as err:
        return err
    except Exception:  # the diagnosis must never hide vLLM's own error
        return None
    return None


def given_field_names(cls, args: tuple, kwargs: dict) -> frozenset[str]:
    """Names of the dataclass fields a constructor call sets (positional ones included)."""
    positional = [f.name for f in dataclasses.fields(cls) if f.init][: len(args)]
    return frozenset(positional) | frozenset(kwargs)


def install_speculative_hook(asked: str) -> bool:
    """Call on_speculative_config at the end of SpeculativeConfig.__post_init__.

    ``asked``: ``draft_class.asked_class``, "plugin" or "upstream" (checkpoint checks and
    the greedy shortcut apply to the plugin's class only). SpeculativeConfig.__init__ is
    wrapped too, to note which fields the caller set: vLLM builds it from the user's
    speculative config (engine/arg_utils.py `SpeculativeConfig(**self.speculative_config)`,
    0.28-0.33), so an explicit ``"use_local_argmax_reduction": false`` is told apart from
    the default; and to name the file and field where vLLM fails on a malformed draft
    config.json.
    """

    def make_post_init(original):
        def __post_init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            guarded(self, asked)

        return __post_init__

    def make_init(original):
        def __init__(self, *args, **kwargs):
            token = _USER_GIVEN.set(given_field_names(type(self), args, kwargs))
            try:
                original(self, *args, **kwargs)
            except (DraftRefusedError, PluginHookError):
                raise
            except Exception as err:
                found = diagnosis(kwargs)
                if found is None:
                    raise
                raise DraftRefusedError(f"{found} (vLLM's own error: {type(err).__name__}: "
                                        f"{str(err).strip().splitlines()[-1]})") from None
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
