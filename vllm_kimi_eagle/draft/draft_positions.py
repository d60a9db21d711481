"""How the draft's attention knows positions: rotated rope dims (RoPE) or none (NoPE).

Kimi-K3's MLA is NoPE: the 64 "rope" dims of q and k exist but are never rotated, and the
softmax scale is the plain 1/sqrt(qk_nope + qk_rope). Its EAGLE3 draft configs say so
with ``"mla_use_nope": true``; vLLM's in-tree draft class ignores the field and rotates.
But a config field is only what its writer meant: TorchSpec, which trains lightseekorg's
MLA drafts, does not read ``mla_use_nope`` (its DeepSeek EAGLE3 draft always rotates, with
yarn's mscale; torchspec/models/draft/deepseek_eagle.py), so a TorchSpec export that
carries the field was trained with RoPE. The decision, as data and one pure function:

1. ``VLLM_KIMI_EAGLE_DRAFT_NOPE`` (on/off), over everything;
2. ``mla_use_nope_measured: true`` (``calibrate --write`` writes it with the reading it
   measured): ``mla_use_nope`` as written, whoever wrote the file;
3. no ``mla_use_nope`` (or false): RoPE, as every Kimi-K2 draft;
4. written by TorchSpec (``_torchspec_version``): RoPE, as it trained;
5. otherwise NoPE, as written; said AMBIGUOUS, because the shipped K3 drafts' configs are
   not public and a TorchSpec draft whose export dropped its marker reads the same.

The speculative hook hands the decision to the draft class with the others
(``served_draft.py``) and logs it; ``inspect`` prints it; ``vllm-kimi-eagle calibrate``
measures both readings and writes the one the draft was trained on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vllm_kimi_eagle import settings

from vllm_kimi_eagle.draft.draft_config import (
    TOOL_FINGERPRINTS,
    TORCHSPEC,
    DraftConfig,
    written_by,
)

NOPE_KEY = "mla_use_nope"
MEASURED_KEY = "mla_use_nope_measured"
NOPE_ENV = settings.DRAFT_NOPE.name
# Tools known to write mla_use_nope without training by it (draft_config's
# TOOL_FINGERPRINTS), with where that was read.
IGNORING_TOOLS = (
    (TORCHSPEC, "lightseekorg/TorchSpec torchspec/models/draft/deepseek_eagle.py (builds the "
     "rotary embedding and yarn's mscale for every MLA draft; never reads mla_use_nope)"),
)


@dataclass(frozen=True)
class PositionDecision:
    nope: bool
    written: bool  # what the config says
    reason: str
    ambiguous: bool = False

    def log_line(self) -> str:
        what = "NoPE (rope dims not rotated)" if self.nope else "RoPE (rope dims rotated)"
        line = f"draft attention read as {what}: {self.reason}"
        if self.ambiguous:
            line += (f". AMBIGUOUS: a draft trained by TorchSpec carries {NOPE_KEY} but was "
                     f"trained with RoPE; if yours was, set {NOPE_ENV}=off (measure both "
                     f"readings with `vllm-kimi-eagle calibrate`, which writes the one measured)")
        return line


def decide_positions(draft_config: DraftConfig, environ=os.environ) -> PositionDecision:
    written = bool(draft_config.mla_use_nope)
    asked = settings.value(settings.DRAFT_NOPE, environ)
    if asked is not None:
        return PositionDecision(asked, written, f"set by {NOPE_ENV}; config.json "
                                f"{NOPE_KEY} is {str(written).lower()}")
    if draft_config.mla_use_nope_measured:
        return PositionDecision(written, written, f"config.json sets {NOPE_KEY} "
                                f"{str(written).lower()}, measured ({MEASURED_KEY}: true, "
                                "as `vllm-kimi-eagle calibrate --write` writes it)")
    if not written:
        return PositionDecision(False, False, f"config.json does not set {NOPE_KEY}")
    for tool, source in IGNORING_TOOLS:
        if written_by(draft_config, tool):
            return PositionDecision(False, True, f"config.json sets {NOPE_KEY}, but {tool} "
                                    f"wrote it ({TOOL_FINGERPRINTS[tool]}), which trains with "
                                    f"RoPE ({source})")
    return PositionDecision(True, True, f"config.json sets {NOPE_KEY}", ambiguous=True)
