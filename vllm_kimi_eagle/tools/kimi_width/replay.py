"""The acceptance each lifted engine should reach, replayed by the reference models.

The small lift of the same tiny build (``fixtures/lifted.SMALL``, float32, seconds to
write) computes the wide models' function, with the same permutation of the drafts'
residual stream. Over an engine's own greedy tokens it counts what vLLM counts
(``offline.served_acceptance``), the engine's serving applied: a control
(``controls.applied``), or RoPE on a NoPE draft under vLLM's class.
"""

from __future__ import annotations

import contextlib
import os

from vllm_kimi_eagle.fixtures import controls as ctl
from vllm_kimi_eagle.fixtures import lifted


def small_lift(tiny_folder: str) -> str:
    """The small lift of the tiny build in ``tiny_folder``, written beside it once."""
    import torch

    folder = lifted.default_folder(tiny_folder, "small")
    if not lifted.is_built(folder, tiny_folder, lifted.SMALL):
        ctl.write_models(tiny_folder, folder, lifted.SMALL, dtype=torch.float32)
    return folder


def reference_acceptance(cases, results: dict, prompts: list[list[int]], k: int,
                         tiny_folder: str) -> dict[str, float]:
    """Case name -> the reference's acceptance over that engine's tokens."""
    import torch

    from vllm_kimi_eagle.fixtures import offline
    from vllm_kimi_eagle.fixtures.variants import TRAINED

    small = small_lift(tiny_folder)
    target = offline.load_target_folder(os.path.join(small, "target"))
    drafts, out = {}, {}
    for case in cases:
        result = results.get(case.name, {})
        if case.draft is None or "token_ids" not in result:
            continue
        if case.draft not in drafts:
            drafts[case.draft] = offline.load_draft_folder(os.path.join(small, case.draft),
                                                           target)
        draft = drafts[case.draft]
        capture = TRAINED[lifted.draft_named(case.draft).trained].capture
        sequences = [(len(p), torch.tensor(p + list(t)))
                     for p, t in zip(prompts, result["token_ids"])]
        control = ctl.control_named(case.control) if case.control else None
        with (ctl.applied(control, target, draft, capture) if control
              else contextlib.nullcontext((draft, capture))) as (served, ids):
            out[case.name] = round(offline.served_acceptance(target, served, sequences,
                                                             tuple(ids), k), 3)
    return out
