"""The engines ``gpu-check`` starts: one Case per engine, as data."""

from __future__ import annotations

import json
from dataclasses import dataclass

from vllm_kimi_eagle.tools.engines import vllm_runners

BASE, EAGLE31 = "draft", "draft-eagle3.1"
# Quantized copies of the base draft gpu-check writes next to the tiny models (folder ->
# scheme and block of fixtures/quantized.py): vLLM's GPU FP8 kernels, both classes. Square
# blocks: vLLM's GPU block-FP8 path serves no others (quantization.serving_problem).
FP8 = "draft-fp8-block64"
QUANTIZED = {FP8: ("fp8-block", (64, 64))}
PLUGIN, IN_TREE = "plugin", "in-tree"
# What the plugin's one INFO line about vLLM's use_local_argmax_reduction must say.
SHORTCUT_ON = "is on, turned on by the plugin"
SHORTCUT_USER = "is off, left as it was: set in the speculative config"
SHORTCUT_PROBABILISTIC = "is off, left as it was: vLLM rejects it with draft_sample_method"


@dataclass(frozen=True)
class Case:
    """One engine: which runner, which draft served by which class, which settings."""

    name: str
    runner: str  # "default" (vLLM picks), "v1" or "v2" (forced)
    draft: str | None = None  # a draft folder of the tiny models; None: no speculation
    draft_class: str | None = None  # PLUGIN or IN_TREE
    spec_extra: tuple[tuple[str, object], ...] = ()
    shortcut: str | None = None  # the expected words of the plugin's shortcut line
    tensor_parallel: int = 1
    no_draft: str | None = None  # the case without a draft whose tokens are compared
    in_tree_twin: str | None = None  # the in-tree case that must match this one exactly

    def env(self) -> dict[str, str]:
        env = {"VLLM_KIMI_EAGLE_DRAFT": "upstream" if self.draft_class == IN_TREE else "plugin"}
        if self.runner != "default":
            env[vllm_runners.RUNNER_SWITCH] = vllm_runners.RUNNER_VALUES[self.runner]
        return env

    def speculative_config(self, models: str, k: int) -> dict | None:
        if self.draft is None:
            return None
        return {"method": "eagle3", "model": f"{models}/{self.draft}",
                "num_speculative_tokens": k, **dict(self.spec_extra)}

    def describe(self) -> str:
        what = "no draft" if self.draft is None else f"{self.draft} ({self.draft_class})"
        extra = ", ".join(f"{k}={json.dumps(v)}" for k, v in self.spec_extra)
        tp = f", TP={self.tensor_parallel}" if self.tensor_parallel > 1 else ""
        return f"runner {self.runner}: {what}" + (f", {extra}" if extra else "") + tp


def runner_group(runner: str, tensor_parallel: int = 1, full: bool = True) -> list[Case]:
    """No draft, both classes on both drafts, and (``full``) the two shortcut settings."""
    tag = runner + (f"-tp{tensor_parallel}" if tensor_parallel > 1 else "")
    none = f"{tag}/none"
    cases = [Case(none, runner, tensor_parallel=tensor_parallel)]
    for draft in (BASE, EAGLE31) if full else (BASE,):
        theirs = f"{tag}/{draft}/in-tree"
        cases += [
            Case(f"{tag}/{draft}/plugin", runner, draft, PLUGIN, shortcut=SHORTCUT_ON,
                 tensor_parallel=tensor_parallel, no_draft=none, in_tree_twin=theirs),
            Case(theirs, runner, draft, IN_TREE, tensor_parallel=tensor_parallel,
                 no_draft=none),
        ]
    if full:
        cases += [
            Case(f"{tag}/{BASE}/plugin-probabilistic", runner, BASE, PLUGIN,
                 (("draft_sample_method", "probabilistic"),), SHORTCUT_PROBABILISTIC,
                 tensor_parallel, none),
            Case(f"{tag}/{BASE}/plugin-user-false", runner, BASE, PLUGIN,
                 (("use_local_argmax_reduction", False),), SHORTCUT_USER,
                 tensor_parallel, none),
        ]
    return cases


def quantized_group() -> list[Case]:
    """Both classes on the block-FP8 copy of the base draft, with the runner vLLM picks."""
    theirs = f"default/{FP8}/in-tree"
    return [Case(f"default/{FP8}/plugin", "default", FP8, PLUGIN, shortcut=SHORTCUT_ON,
                 no_draft="default/none", in_tree_twin=theirs),
            Case(theirs, "default", FP8, IN_TREE, no_draft="default/none")]


def matrix(gpus: int) -> list[Case]:
    """Every case: the runner vLLM picks (no draft, both classes on the base draft and on
    its block-FP8 copy), a full group with each runner forced, and with two GPUs the same
    three cases as the first at tensor parallel 2."""
    cases = runner_group("default", full=False) + quantized_group()
    cases += [case for runner in vllm_runners.RUNNER_VALUES for case in runner_group(runner)]
    if gpus >= 2:
        cases += runner_group("default", tensor_parallel=2, full=False)
    return cases
