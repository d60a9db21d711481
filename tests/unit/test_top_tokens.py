"""Greedy argmax shortcut: same token as the plain path, ties included.

``plain_top1`` and ``shortcut_top1``, the two paths on one rank, live here: only tests
compare them. Served by real engines: tests/e2e/test_greedy_shortcut_e2e.py.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import skip_without_a_device
from vllm_kimi_eagle.serving.top_tokens import (
    d2t_is_increasing,
    reduce_top1,
    shard_top1,
    to_target_vocab,
)


TARGET_VOCAB = 1000


def plain_top1(draft_logits: torch.Tensor, d2t: torch.Tensor | None, target_vocab: int) -> torch.Tensor:
    """The plain path, for comparison: full target-vocabulary logits, then argmax."""
    return to_target_vocab(draft_logits, d2t, target_vocab).argmax(dim=-1)


def shortcut_top1(draft_logits: torch.Tensor, d2t: torch.Tensor | None) -> torch.Tensor:
    """The shortcut on unsharded draft logits (one rank)."""
    _, target_ids = shard_top1(
        draft_logits, 0, draft_logits.shape[-1], d2t, d2t_is_increasing(d2t)
    )
    return target_ids


def pruned_d2t(draft_vocab: int, generator, shuffled: bool = False) -> torch.Tensor:
    targets = torch.randperm(TARGET_VOCAB, generator=generator)[:draft_vocab]
    targets = targets if shuffled else targets.sort().values
    return targets - torch.arange(draft_vocab)


def sharded_top1(logits: torch.Tensor, d2t, shards: int) -> torch.Tensor:
    """The tensor-parallel path on one machine: uneven shards, each padded like
    VocabParallelEmbedding pads them, reduced as (value, target id) pairs."""
    vocab = logits.shape[-1]
    per_shard = -(-vocab // shards)
    values, ids = [], []
    for rank in range(shards):
        start = rank * per_shard
        valid = max(0, min(per_shard, vocab - start))
        shard = torch.full((logits.shape[0], per_shard), 123.0)  # padding: must be ignored
        shard[:, :valid] = logits[:, start : start + valid]
        if valid == 0:
            continue
        v, i = shard_top1(shard, start, valid, d2t, d2t_is_increasing(d2t))
        values.append(v[:, None])
        ids.append(i[:, None])
    return reduce_top1(torch.cat(values, -1), torch.cat(ids, -1))


@pytest.mark.parametrize(
    "draft_vocab, d2t_kind",
    [(TARGET_VOCAB, "none"), (320, "increasing"), (333, "increasing"), (320, "shuffled"),
     (333, "shuffled")],
)
@pytest.mark.parametrize("shards", [1, 2, 3])
def test_shortcut_equals_plain_path(draft_vocab, d2t_kind, shards):
    g = torch.Generator().manual_seed(draft_vocab * 7 + shards)
    d2t = None if d2t_kind == "none" else pruned_d2t(draft_vocab, g, d2t_kind == "shuffled")
    logits = torch.randn(64, draft_vocab, generator=g)
    expected = plain_top1(logits, d2t, TARGET_VOCAB)
    assert torch.equal(shortcut_top1(logits, d2t), expected)
    assert torch.equal(sharded_top1(logits, d2t, shards), expected)


@pytest.mark.parametrize("d2t_kind", ["none", "increasing", "shuffled"])
@pytest.mark.parametrize("shards", [1, 2, 3])
def test_ties_go_to_the_lowest_target_id_like_the_plain_path(d2t_kind, shards):
    g = torch.Generator().manual_seed(11)
    draft_vocab = TARGET_VOCAB if d2t_kind == "none" else 257
    d2t = None if d2t_kind == "none" else pruned_d2t(draft_vocab, g, d2t_kind == "shuffled")
    # Integer-valued logits with a handful of levels: many exact ties at the maximum,
    # spread across shards.
    logits = torch.randint(0, 4, (128, draft_vocab), generator=g).float()
    logits[:, [5, draft_vocab // 2, draft_vocab - 1]] = 9.0  # a 3-way tie in every row
    expected = plain_top1(logits, d2t, TARGET_VOCAB)
    targets = torch.arange(draft_vocab) + (d2t if d2t is not None else 0)
    assert torch.equal(expected, targets[[5, draft_vocab // 2, draft_vocab - 1]].min().expand(128))
    assert torch.equal(shortcut_top1(logits, d2t), expected)
    assert torch.equal(sharded_top1(logits, d2t, shards), expected)


def test_d2t_monotonicity_is_detected():
    assert d2t_is_increasing(None)
    assert d2t_is_increasing(torch.tensor([0, 0, 5, 5]))  # targets 0, 1, 7, 8
    assert not d2t_is_increasing(torch.tensor([3, -1, 0]))  # targets 3, 0, 2


def test_draft_class_matches_plain_path_with_a_bf16_logit_scale():
    """Our class's get_top_tokens on a real vLLM ParallelLMHead/LogitsProcessor, against
    the plain path, with a logit scale that rounds two distinct bf16 logits to one value:
    the plain path (scale, then argmax) then picks the lower id, and so must we."""
    skip_without_a_device()
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    from vllm_kimi_eagle.serving.draft_model import Eagle3DeepseekV2ForCausalLM as Ours
    from vllm_kimi_eagle.tools.bench_sampler import DraftHead, single_rank_vllm

    grid = torch.arange(1.0, 2.0, 2**-7, dtype=torch.bfloat16)  # consecutive bf16 values
    scale = next(s for s in (0.3, 0.7, 1 / 3, 0.9) if bool(
        ((grid[:-1] * s) == (grid[1:] * s)).any()))
    i = int(((grid[:-1] * scale) == (grid[1:] * scale)).nonzero()[0])
    low, high = grid[i], grid[i + 1]
    vocab = 64
    with single_rank_vllm():
        head = DraftHead(vocab, vocab, None, vocab, torch.device("cpu"), torch.bfloat16,
                         weight=torch.eye(vocab))  # logits == hidden states, exactly
        head.logits_processor = LogitsProcessor(vocab, scale=scale)
        h = torch.zeros(1, vocab, dtype=torch.bfloat16)
        h[0, 5], h[0, 9] = low, high  # unscaled: 9 wins; scaled: a tie, 5 wins
        plain = Ours.compute_logits(head, h).argmax(dim=-1)
        ours = Ours.get_top_tokens(head, h)
    assert int(plain) == 5, (scale, low, high)
    assert torch.equal(ours, plain)
