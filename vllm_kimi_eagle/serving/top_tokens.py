"""Greedy draft-token choice (vLLM's ``get_top_tokens``) without the full-vocabulary detour.

The plain path builds logits over the *target* vocabulary (a ``-inf`` tensor of
batch x target_vocab, draft logits scattered into it through d2t) and takes the argmax.
For a greedy draft only the top token matters, so the shortcut takes the argmax over the
draft's own vocabulary shard, reduces (value, target id) pairs across tensor-parallel
ranks, and maps only the winner through d2t. No softmax, no scatter, no target-vocabulary
temporary.

Tie rule (the plain path's, kept exactly): among equal maximal logits the *lowest target
id* wins, because ``argmax`` over the target vocabulary returns the first maximum. When
d2t is increasing (target ids ascend with draft ids, as in every pruned vocabulary we
know), the lowest draft id is the lowest target id and a plain ``max`` suffices;
otherwise the tied candidates are compared by target id explicitly.
"""

from __future__ import annotations

import torch

NO_ID = torch.iinfo(torch.long).max


def d2t_is_increasing(d2t: torch.Tensor | None) -> bool:
    """Whether target ids (draft id + d2t) strictly increase with the draft id."""
    if d2t is None:
        return True
    targets = torch.arange(d2t.numel(), device=d2t.device) + d2t.to(torch.long)
    return bool((targets[1:] > targets[:-1]).all())


def shard_top1(
    logits: torch.Tensor,
    vocab_start: int,
    num_valid: int,
    d2t: torch.Tensor | None,
    d2t_increasing: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(max logit, its target id) per row over one vocabulary shard of draft logits.

    ``logits`` [batch, shard width] holds draft ids ``vocab_start + j``; columns from
    ``num_valid`` on are padding. ``d2t`` is the full offset table (or None). The
    reduction is ``max(dim)``, which returns the first maximum like ``argmax`` and gives
    the value and the index in one pass (``bench-sampler`` times it).
    """
    logits = logits[:, :num_valid]
    if d2t is None or d2t_increasing:
        values, local = logits.max(dim=-1)
        draft_ids = local + vocab_start if vocab_start else local
        target_ids = draft_ids if d2t is None else draft_ids + d2t[draft_ids]
        return values, target_ids
    values = logits.max(dim=-1, keepdim=True).values
    draft_ids = torch.arange(vocab_start, vocab_start + num_valid, device=logits.device)
    shard_targets = draft_ids + d2t[vocab_start : vocab_start + num_valid]
    target_ids = torch.where(logits == values, shard_targets, NO_ID).min(dim=-1).values
    return values.squeeze(-1), target_ids


def reduce_top1(values: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
    """Winner among candidates [batch, k] (one per rank): highest value, lowest id on ties."""
    best = values.max(dim=-1, keepdim=True).values
    return torch.where(values == best, target_ids, NO_ID).min(dim=-1).values


def to_target_vocab(draft_logits: torch.Tensor, d2t: torch.Tensor | None,
                    target_vocab: int) -> torch.Tensor:
    """Logits over the target vocabulary: draft logits scattered through d2t, -inf elsewhere."""
    if d2t is None:
        return draft_logits
    targets = torch.arange(draft_logits.shape[-1], device=draft_logits.device) + d2t
    full = draft_logits.new_full((draft_logits.shape[0], target_vocab), float("-inf"))
    full[:, targets] = draft_logits
    return full
