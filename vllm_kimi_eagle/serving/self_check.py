"""Did vLLM do what the plugin decided? The plan (what the speculative hook attached to
the draft's config, ``served_draft.py``) against what vLLM built (``enacted.py``).

``expected_draft`` is the draft as the plan says it must be built, for the class that
serves it; ``differences`` names each fact where the two part, with both values. Pure
functions: the worker's check and the tests call them on live objects.
"""

from __future__ import annotations

import math

from vllm_kimi_eagle.draft.draft_config import DraftConfig
from vllm_kimi_eagle.draft.draft_spec import DraftSpec

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
