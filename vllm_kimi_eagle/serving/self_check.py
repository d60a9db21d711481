"""Did vLLM do what the plugin decided? The plan (what the speculative hook attached to
the draft's config, ``served_draft.py``) against what vLLM built (``enacted.py``).

``expected_draft`` is the draft as the plan says it must be built, for the class that
serves it; ``differences`` names each fact where the two part, with both values (pure
functions). ``check_runner`` runs in every worker once its model runner has loaded the
target and the draft (``install_self_check`` wraps the runners' load_model): the capture
ids on the target, the class serving the draft, the draft as built, the greedy shortcut
flag, each against the plan; a difference stops the engine with one error line each. What
each worker read goes to a file the server's /metrics reads (``plan_metric.py``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field

from vllm_kimi_eagle.draft.draft_config import DraftConfig
from vllm_kimi_eagle.draft.draft_spec import DraftSpec

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler

# Rope types vLLM's MLA attention serves as DeepSeek YaRN (deepseek_v2.py: every type but
# default, unless attention_factor is 1.0, which the record refuses).
YARN_SERVED = ("yarn", "deepseek_yarn")


def yarn_mscale(factor: float, mscale: float) -> float:
    """vLLM's yarn_get_mscale (deepseek_v2.py)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def softmax_scale(spec: DraftSpec, config: DraftConfig, rotated: bool) -> float:
    """The softmax scale vLLM's MLA attention is built with: 1/sqrt(qk head dim), times
    yarn's mscale(mscale_all_dim) squared where a yarn rope is rotated."""
    scale = (spec.qk_nope_head_dim + spec.qk_rope_head_dim) ** -0.5
    rope = config.rope
    if rotated and rope.kind in YARN_SERVED and rope.factor:
        block = getattr(config, rope.block) if rope.block else None
        all_dim = (block.mscale_all_dim if block is not None else None) or 0.0
        scale *= yarn_mscale(rope.factor, float(all_dim)) ** 2
    return scale


def expected_draft(spec: DraftSpec, config: DraftConfig, *, ours: bool, nope: bool,
                   rope_theta: float | None) -> dict:
    """The facts of ``enacted.BuiltDraft`` the plan fixes, for the plugin's class
    (``ours``) or vLLM's, which rotates every draft and builds both norms."""
    rotated = not (ours and nope)
    rope = config.rope
    return {
        "nope": not rotated,
        "rope_base": rope_theta if rotated else None,
        "rope_factor": (rope.factor if rotated and rope.kind in YARN_SERVED else None),
        "softmax_scale": softmax_scale(spec, config, rotated),
        "output_gate": spec.output_gate and ours,
        "fc_norm": spec.fc_norm,
        "norm_output": spec.norm_output,
        "norm_before_residual": spec.norm_before_residual,
        "hidden_norm": spec.hidden_norm or not ours,
        "final_norm": spec.final_norm or not ours,
        "d2t": spec.pruned_vocab,
        "draft_vocab": spec.draft_vocab_size,
        "logit_scale": spec.logit_scale,
        "captured_states": spec.num_aux,
    }


def differences(expected: dict, built: dict) -> list[str]:
    """One line per fact where what vLLM built parts from the plan: planned, then built."""
    found = []
    for name, planned in expected.items():
        enacted = built.get(name)
        same = math.isclose(planned, enacted, rel_tol=1e-6) \
            if isinstance(planned, float) and isinstance(enacted, float) else planned == enacted
        if not same:
            found.append(f"{name}: planned {planned!r}, built {enacted!r}")
    return found


# ---- the check where vLLM serves the draft: every worker, once its models loaded ----------
# The classes serving the draft, by the hook's decision.
CLASS_PREFIXES = {"plugin": ("vllm_kimi_eagle.",),
                  "vllm": ("vllm.model_executor.models.deepseek_eagle3:",)}


class SelfCheckError(RuntimeError):
    """vLLM did not do what the plugin decided for the draft: the engine does not start."""


@dataclass
class Checked:
    """What one worker read off vLLM's objects, and where it parts from the plan."""

    draft: str
    enacted: dict = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def record(self, plan, rank: str) -> dict:
        return {"draft": self.draft, "rank": rank, "pid": os.getpid(),
                "plugin_version": plugin_version(), "plan": plan_summary(plan),
                "enacted": self.enacted, "differences": self.differences,
                "seconds": round(self.seconds, 6)}


def plugin_version() -> str:
    """The installed plugin's version (its package metadata), or "unknown"."""
    import importlib.metadata

    try:
        return importlib.metadata.version("vllm-kimi-eagle")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def plan_summary(plan) -> dict:
    """The plan as the info metric and ``status`` print it."""
    return {"draft_class": plan.draft_class, "capture_ids": plan.capture_ids,
            "convention": plan.convention, "nope": plan.nope,
            "rope_theta": plan.rope_theta, "shortcut": plan.shortcut}


def check(plan, spec_config, target, draft, drafter=None) -> Checked:
    """The plan against vLLM's live objects: the capture ids on the target, the class
    serving the draft, the draft as built, the greedy shortcut flag as the proposer
    (``drafter``) reads it."""
    from vllm_kimi_eagle.draft.draft_spec import draft_layout, spec_from_config
    from vllm_kimi_eagle.serving import enacted

    started = time.perf_counter()
    found = Checked(spec_config.draft_model_config.model)
    ours = plan.draft_class != "vllm"
    captured = enacted.target_capture_ids(target) if target is not None else None
    found.enacted["capture_ids"] = list(captured) if captured is not None else None
    if plan.capture_ids is not None and captured != tuple(plan.capture_ids):
        found.differences.append(f"capture ids on the target: planned "
                                 f"{list(plan.capture_ids)}, enacted "
                                 f"{found.enacted['capture_ids']}")
    if draft is not None:
        built = enacted.draft_as_built(draft)
        found.enacted.update(built.as_dict())
        if plan.draft_class in CLASS_PREFIXES and \
                not built.draft_class.startswith(CLASS_PREFIXES[plan.draft_class]):
            found.differences.append(f"class serving the draft: planned {plan.draft_class}'s, "
                                     f"enacted {built.draft_class}")
        config = plan.config
        spec = spec_from_config(config, served_nope=plan.nope and ours) if ours \
            else draft_layout(config, in_tree=True)
        expected = expected_draft(spec, config, ours=ours, nope=plan.nope,
                                  rope_theta=plan.rope_theta)
        found.differences += [f"draft as built: {line}"
                              for line in differences(expected, built.as_dict())]
    flag = enacted.shortcut_flag(spec_config, drafter)
    found.enacted["shortcut"] = flag
    if plan.shortcut is not None and flag != plan.shortcut:
        found.differences.append(f"greedy shortcut (use_local_argmax_reduction): planned "
                                 f"{plan.shortcut}, enacted {flag}")
    found.seconds = time.perf_counter() - started
    return found


def _rank() -> str:
    """This worker's tensor- and data-parallel rank, in words ("tp0", "dp1-tp3")."""
    try:
        from vllm.distributed import parallel_state

        tp = parallel_state.get_tensor_model_parallel_rank()
        dp = getattr(parallel_state.get_dp_group(), "rank_in_group", 0)
        return f"dp{dp}-tp{tp}" if dp else f"tp{tp}"
    except Exception:  # no distributed state (a test's process)
        return "tp0"


def check_runner(runner) -> Checked | None:
    """The self-check on a model runner that has just loaded its models: None where the
    plugin decided nothing for its draft (no EAGLE3 draft, or one the plugin left to vLLM).
    A difference is one ERROR line each, and the engine does not start
    (VLLM_KIMI_EAGLE_SELF_CHECK=warn: a warning line, and it starts)."""
    from vllm_kimi_eagle import settings
    from vllm_kimi_eagle.draft.served_draft import attached
    from vllm_kimi_eagle.serving import enacted

    spec_config, target, drafter, draft = enacted.runner_parts(runner)
    if spec_config is None or getattr(spec_config, "method", None) != "eagle3" \
            or spec_config.draft_model_config is None:
        return None
    plan = attached(spec_config.draft_model_config.hf_config)
    if plan is None or plan.draft_class is None:
        return None
    from vllm_kimi_eagle.serving import plan_metric

    rank = _rank()
    try:
        found = check(plan, spec_config, target, draft, drafter)
    except Exception as err:  # a reader that does not fit this vLLM: never a failed start
        logger.warning("vllm-kimi-eagle: self-check (%s) could not read what vLLM built for "
                       "%s (%s: %s); the engine starts unchecked. Please report it with "
                       "your vLLM version.", rank, spec_config.draft_model_config.model,
                       type(err).__name__, err)
        return None
    record = found.record(plan, rank)
    plan_metric.write_record(record)
    plan_metric.publish(record)
    if not found.differences:
        logger.info("vllm-kimi-eagle: self-check (%s): vLLM enacted what the plugin "
                    "decided for %s: capture ids %s, %s class, %s, rope base %s, greedy "
                    "shortcut %s (read in %.1f ms)", rank, found.draft, plan.capture_ids,
                    plan.draft_class, "NoPE" if found.enacted.get("nope") else "RoPE",
                    found.enacted.get("rope_base"), found.enacted.get("shortcut"),
                    found.seconds * 1000)
        return found
    refuse = settings.value(settings.SELF_CHECK) == "refuse"
    log = logger.error if refuse else logger.warning
    for line in found.differences:
        log("vllm-kimi-eagle: self-check (%s) of %s: vLLM did not do what the plugin "
            "decided: %s", rank, found.draft, line)
    if refuse:
        raise SelfCheckError(
            f"vllm-kimi-eagle: vLLM did not serve the draft {found.draft} as the plugin "
            f"decided ({len(found.differences)} difference(s), {rank}): "
            + "; ".join(found.differences) + ". The engine does not start: served so, the "
            "draft would propose otherwise than trained. Report it with your vLLM version; "
            f"{settings.SELF_CHECK.name}=warn starts it anyway, with these lines as "
            "warnings.")
    return found


def install_self_check() -> None:
    """Run ``check_runner`` after each model runner's load_model, in the processes that
    import a runner (the engine's workers); nothing in any other process."""
    from vllm_kimi_eagle.compat import patching, vllm_compat

    def make_load(original):
        def load_model(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            check_runner(self)
            return result

        return load_model

    for location in vllm_compat.MODEL_RUNNERS:
        patching.when_imported(location[0], lambda location=location: patching.wrap_method(
            location, vllm_compat.MODEL_RUNNER_LOAD, make_load,
            "the plugin cannot check in this runner that vLLM serves the draft as it "
            "decided."))
