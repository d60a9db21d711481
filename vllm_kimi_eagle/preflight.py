"""Checks on an EAGLE3 MLA draft when vLLM builds its speculative config.

This runs in the process that parses the arguments (API server, ``LLM(...)``), right
after vLLM has read and wrapped the draft's config, so a checkpoint that does not match
its config fails there, with every problem listed, before an engine starts or a weight
loads. The draft class checks again while loading (for drafts that are not local folders).
"""

from __future__ import annotations

import os

from vllm_kimi_eagle import checkpoint, vllm_compat
from vllm_kimi_eagle.draft_spec import spec_from_config
from vllm_kimi_eagle.patching import wrap_method

PLUGIN_DRAFT_ARCHITECTURES = frozenset(
    {"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"}
)


def draft_problems(
    draft_folder: str, draft_config, target_vocab: int, target_hidden: int
) -> list[str]:
    """Every problem of a local draft checkpoint against its (wrapped) config."""
    source = os.path.join(draft_folder, "config.json")
    spec = spec_from_config(draft_config, source=source)
    tensors = checkpoint.read_checkpoint(draft_folder)
    return checkpoint.check_checkpoint(
        spec, tensors, target_vocab=target_vocab, target_hidden=target_hidden
    )


def check_speculative_config(spec_config) -> None:
    """Raise CheckpointError if the config's MLA EAGLE3 draft would not serve as trained."""
    if getattr(spec_config, "method", None) != "eagle3":
        return
    draft = getattr(spec_config, "draft_model_config", None)
    target = getattr(spec_config, "target_model_config", None)
    if draft is None or target is None:
        return
    if not PLUGIN_DRAFT_ARCHITECTURES & set(draft.architectures or ()):
        return
    if not os.path.isdir(draft.model):
        return  # a hub id: the draft class checks while loading
    problems = draft_problems(
        draft.model, draft.hf_config, target.get_vocab_size(), target.get_hidden_size()
    )
    if problems:
        raise checkpoint.CheckpointError(
            f"the EAGLE3 MLA draft at {draft.model} does not match its config.json "
            f"({len(problems)} problem(s)); vLLM would serve it with lower acceptance or "
            "fail later:\n  - " + "\n  - ".join(problems)
        )


def install_preflight() -> bool:
    """Run check_speculative_config at the end of SpeculativeConfig.__post_init__."""

    def make_wrapper(original):
        def __post_init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            check_speculative_config(self)

        return __post_init__

    return wrap_method(
        vllm_compat.SPECULATIVE_CONFIG,
        "__post_init__",
        make_wrapper,
        "draft checkpoints are checked only while their weights load.",
    )
