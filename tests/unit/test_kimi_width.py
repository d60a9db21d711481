"""The Kimi-width models' construction (fixtures/kimi_width.py, wide_weights.py), proven at a
small width with no vLLM: transformers' DeepSeek-V3 runs the target, the pure-PyTorch
reference runs each draft from the files written. The target's greedy tokens are the ones
``expected_tokens`` names; every draft is accepted at every position when read right, and
collapses when it reads the layers one off or its d2t is dropped: what makes an error at
real width show as a collapse, not as noise."""

from __future__ import annotations

import json
import os

import pytest
import torch

from vllm_kimi_eagle.draft.checkpoint import read_checkpoint
from vllm_kimi_eagle.draft.draft_config import parse_draft_config
from vllm_kimi_eagle.draft.draft_spec import canonical_name, expected_tensors, spec_from_config
from vllm_kimi_eagle.fixtures import kimi_width as kw
from vllm_kimi_eagle.fixtures import streamed_safetensors as streamed
from vllm_kimi_eagle.fixtures import wide_weights as ww
from vllm_kimi_eagle.fixtures.reference import ReferenceDraft
from vllm_kimi_eagle.fixtures.target import KIMI_FIELDS

K = 3


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("wide") / "small")
    kw.write_models(folder, kw.SMALL)
    return folder


def _tensors(folder: str) -> dict:
    from safetensors.torch import load_file

    out = {}
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, name)))
    return out


@pytest.fixture(scope="module")
def target(small):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    with open(os.path.join(small, "target", "config.json")) as f:
        config = json.load(f)
    rope = dict(config.pop("rope_scaling"), rope_type="yarn", rope_theta=config["rope_theta"])
    fields = {k: v for k, v in config.items() if k not in KIMI_FIELDS}
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**fields, rope_parameters=rope))
    missing, unexpected = model.load_state_dict(
        {k: v.float() for k, v in _tensors(os.path.join(small, "target")).items()}, strict=False)
    assert not unexpected and all("e_score_correction_bias" in m for m in missing), missing
    return model.float().eval()


def _reference_draft(folder: str, target_tensors: dict) -> ReferenceDraft:
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    spec = spec_from_config(parse_draft_config(raw, folder))
    rope = dict(raw["rope_scaling"], rope_type="yarn", rope_theta=raw["rope_theta"])
    draft = ReferenceDraft(spec, rope)
    state = {canonical_name(k): v.float() if v.is_floating_point() else v
             for k, v in _tensors(folder).items()}
    state.setdefault("embed_tokens.weight", target_tensors["model.embed_tokens.weight"].float())
    state.pop("t2d", None)
    draft.load_state_dict(state)
    return draft.eval()


@pytest.fixture(scope="module")
def served(target):
    """Per prompt: (prompt length, prompt + the constructed continuation, the target's
    states at every layer input, its greedy choice at every position), one forward each."""
    out = []
    for prompt in kw.prompts(kw.SMALL, count=2, length=12):
        seq = torch.tensor(prompt + kw.expected_tokens(prompt, 24, kw.SMALL))
        with torch.no_grad():
            result = target(input_ids=seq[None], output_hidden_states=True)
        out.append((len(prompt), seq, result.hidden_states, result.logits[0].argmax(-1)))
    return out


def _accepted(draft, capture, prompt_len, seq, hidden_states, greedy, use_d2t=True):
    """Acceptance length vLLM would count serving ``draft`` for this greedy sequence with
    the captured layers ``capture`` (inputs of those layers): each verification accepts
    the proposals matched in a row, and the next starts after them."""
    with torch.no_grad():
        aux = torch.cat([hidden_states[i] for i in capture], dim=-1)
        T = len(seq) - K
        inputs = torch.cat([seq[1:], seq.new_zeros(K)])[None, :T + K - 1]
        steps = draft.unroll(inputs, draft.combine(aux[:, :T]), torch.arange(T)[None], K)
        in_a_row, counts = torch.ones(T, dtype=torch.bool), torch.zeros(T, dtype=torch.long)
        for j, (normed, _) in enumerate(steps):
            ids = draft.draft_logits(normed)[0].argmax(-1)
            if draft.spec.pruned_vocab and use_d2t:
                ids = ids + draft.d2t[ids]
            in_a_row &= ids == greedy[1 + j:1 + j + T]
            counts += in_a_row
    drafts = accepted = 0
    t = prompt_len - 1
    while t < T:
        drafts += 1
        accepted += int(counts[t])
        t += int(counts[t]) + 1
    return 1 + accepted / drafts


def test_the_target_continues_every_prompt_as_constructed(served):
    """Its greedy choice after every generated position is the next constructed token, so
    greedy decoding writes exactly ``expected_tokens``."""
    for prompt_len, seq, _, greedy in served:
        assert greedy[prompt_len - 1:-1].tolist() == seq[prompt_len:].tolist()


@pytest.mark.parametrize("name", kw.DRAFT_NAMES)
def test_each_draft_is_accepted_when_read_right_and_collapses_one_layer_off(small, served, name):
    folder = os.path.join(small, name)
    draft = _reference_draft(folder, _tensors(os.path.join(small, "target")))
    capture = list(kw.CAPTURE)
    for case in served:
        assert _accepted(draft, capture, *case) == 1 + K
        for shift in (-1, 1):
            wrong = [i + shift for i in capture]
            assert _accepted(draft, wrong, *case) < 1.5, (name, shift)
        if draft.spec.pruned_vocab:
            assert _accepted(draft, capture, *case, use_d2t=False) < 1.5


def test_the_drafts_hold_exactly_the_tensors_the_plugin_expects(small):
    """Names and shapes of every written draft, against draft_spec's list for its config
    (what the plugin's class loads strictly), and the layouts each export has."""
    for draft in kw.DRAFTS:
        folder = os.path.join(small, draft.name)
        with open(os.path.join(folder, "config.json")) as f:
            spec = spec_from_config(parse_draft_config(json.load(f), folder))
        found = {canonical_name(k): info.shape for k, info in read_checkpoint(folder).items()}
        expected = expected_tensors(spec)
        assert all(expected[k] == v for k, v in found.items()), draft.name
        shared = set(expected) - set(found) - {"d2t"}
        assert shared == ({"embed_tokens.weight"} if draft.layout == "modelopt" else set())
        assert ("d2t" in found) == draft.pruned


def test_vllm_shares_the_drafts_embedding_and_keeps_their_own_lm_head(small):
    """vLLM's proposer replaces a draft's embedding or LM head equal to the target's with
    the target's: the embedding is the target's (as drafts copy Kimi's), the LM head is
    the draft's own, so the draft's full-vocabulary head is what serves."""
    target = _tensors(os.path.join(small, "target"))
    for name in ("draft-k26-eagle3.1", "draft-k3-nope"):
        draft = _tensors(os.path.join(small, name))
        assert torch.equal(draft["embed_tokens.weight"], target["model.embed_tokens.weight"])
        assert draft["lm_head.weight"].shape == target["lm_head.weight"].shape
        assert not torch.equal(draft["lm_head.weight"], target["lm_head.weight"])


def test_kimi_width_sizes_are_the_real_checkpoints():
    """At Kimi's width the K2.6 EAGLE3.1 draft is lightseekorg's 6.03 GB; the files are
    shards of at most 5 GB with an index, as transformers writes them."""
    sizes = kw.folder_bytes(kw.KIMI)
    assert round(sizes["draft-k26-eagle3.1"] / 1e9, 2) == 6.03
    assert round(sizes["draft-k3-nope"] / 1e9, 2) == 6.03
    config, tensors = kw.draft_folder(kw.KIMI, kw.draft_named("draft-modelopt-32k"))
    assert config["draft_vocab_size"] == 32000
    assert {t.name: t.shape for t in tensors}["lm_head.weight"] == (32000, 7168)
    assert {t.name: t.shape for t in tensors}["fc.weight"] == (7168, 3 * 7168)
    shards = streamed.shard_plan(kw.target_tensors(kw.KIMI))
    assert len(shards) == 2 and all(sum(t.nbytes for t in s) <= streamed.MAX_SHARD_BYTES
                                    for s in shards)


def test_headers_only_files_read_as_the_checkpoint(tmp_path):
    """A sparse file has the header and the size of the full one, and no data on disk."""
    plan = kw.draft_folder(kw.KIMI, kw.draft_named("draft-modelopt-32k"))[1]
    summary = streamed.write_checkpoint(str(tmp_path), plan, data=False)
    path = tmp_path / summary["files"][0]
    assert path.stat().st_size == summary["bytes"] > 1.7e9
    assert path.stat().st_blocks * 512 < 10**6
    found = read_checkpoint(str(tmp_path))
    assert {k: v.shape for k, v in found.items()} == {t.name: t.shape for t in plan}


def test_streamed_files_equal_what_safetensors_writes(tmp_path):
    from safetensors.torch import load_file

    tensors = {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4),
               "b": torch.tensor([1, -2, 3], dtype=torch.int64),
               "c": torch.ones(5, 2, dtype=torch.bfloat16)}
    plan = [streamed.PlannedTensor(k, v.dtype, tuple(v.shape), ww._once(v.clone))
            for k, v in tensors.items()]
    streamed.write_checkpoint(str(tmp_path), plan)
    loaded = load_file(str(tmp_path / "model.safetensors"))
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
    bad = [streamed.PlannedTensor("a", torch.float32, (3, 5), ww._once(tensors["a"].clone))]
    with pytest.raises(ValueError, match="takes 60"):
        streamed.write_checkpoint(str(tmp_path / "bad"), bad)


def test_the_embedding_leaves_a_wide_margin():
    """The LM head's own token against the best other over the whole vocabulary (sampled
    tokens); the Kimi-width build records its own in BUILT.json."""
    margin = kw.embedding_margin(kw.SMALL)
    assert margin["own"] == 128 and margin["ratio"] > 2.5, margin


def test_not_enough_disk_is_said_before_writing(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 5 * 10**9))
    with pytest.raises(OSError, match=r"need 21\.\d GB .* 5\.0 GB free"):
        kw.write_models(str(tmp_path / "m"), kw.KIMI)
    assert not os.path.exists(tmp_path / "m.partial")
