"""Scoring a draft under one reading on the captured target states, offline.

The draft is the pure-PyTorch reference (``fixtures/reference.py``, checked against the
plugin's vLLM class in the test suite) with the checkpoint's weights; tensors the draft
shares with the target (``embed_tokens``, ``lm_head``) come from the target's checkpoint.
At every generated position it runs its k chained steps as vLLM does (step 0 reads the
captured states of the reading's layers, step j its own previous output), teacher-forced
on the target's greedy tokens, and counts how many steps in a row it gets right. vLLM
counts only at its verification boundaries, so this is an estimate of the same quantity,
over more positions; ``calibrate`` confirms the winner online.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.draft_config import read_draft_config
from vllm_kimi_eagle.draft.draft_spec import IGNORED_TENSORS, canonical_name, spec_from_config
from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError

# Where a target keeps the tensors a draft may share: DeepSeek-V3 / Kimi-K2 text layout,
# then Kimi-K2.5's multimodal one.
SHARED_PREFIXES = ("", "model.", "language_model.", "language_model.model.")



@dataclass
class Capture:
    """The target's greedy sequences and their captured states, per prompt."""

    layers: list[int]  # captured layer ids, in the order of the states' second axis
    sequences: list  # (prompt length, token ids [T] tensor, states [T-1, layers, hidden])


def load_capture(folder: str, requests: list[dict], layers: list[int]) -> Capture:
    """The captured sequences and states of ``requests`` (manifest entries) in ``folder``."""
    import torch
    from safetensors.torch import load_file

    sequences = []
    for item in requests:
        data = load_file(os.path.join(folder, os.path.basename(item["path"])))
        tokens = torch.tensor(item["sequence"], dtype=torch.long)
        if data["token_ids"].tolist() != item["sequence"][:-1]:
            raise CalibrationError(f"{item['path']}: its token_ids are not the sequence the "
                                   "capture generated; delete the capture folder or pass "
                                   "--capture NEW_FOLDER")
        sequences.append((item["prompt_tokens"], tokens, data["hidden_states"]))
    return Capture(list(layers), sequences)


def _rope_parameters(draft: str) -> dict:
    from transformers import AutoConfig

    from vllm_kimi_eagle.serving.config_alias import register_config_alias

    register_config_alias()
    return dict(AutoConfig.from_pretrained(draft).rope_parameters)


def _shared_from_target(target: str, names: set[str]) -> dict:
    """``embed_tokens.weight`` / ``lm_head.weight`` of the target's language model (the
    text-only or the multimodal layout's names)."""
    from safetensors import safe_open

    stored = checkpoint.read_checkpoint(target)
    found = {}
    for name in names:
        raw = next((prefix + name for prefix in SHARED_PREFIXES if prefix + name in stored), None)
        if raw is None:
            raise CalibrationError(f"{target}: no {name} among the target's tensors (looked "
                                   f"for {', '.join(p + name for p in SHARED_PREFIXES)}); the "
                                   "draft shares it with the target")
        with safe_open(stored[raw].file, "pt") as f:
            found[name] = f.get_tensor(raw)
    return found


def load_draft(draft: str, target: str, rope_theta: float | None = None, device: str = "cpu",
               nope: bool | None = None):
    """The reference draft with the checkpoint's weights (float32, on ``device``), and its
    d2t (draft id -> target id offsets) or None; ``nope``: whether its rope dims are left
    unrotated (None: as config.json says)."""
    from safetensors.torch import load_file

    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft

    spec = spec_from_config(read_draft_config(draft), served_nope=nope)
    if nope is not None and spec.attention == "mla":
        spec = dataclasses.replace(spec, nope=nope)
    rope = _rope_parameters(draft)
    if rope_theta is not None:
        rope["rope_theta"] = rope_theta
    model = ReferenceDraft(spec, rope)
    state = {}
    for path in checkpoint.checkpoint_files(draft):
        for raw, tensor in load_file(path).items():
            name = canonical_name(raw)
            if name in IGNORED_TENSORS or (name == "d2t" and not spec.pruned_vocab):
                continue
            state[name] = tensor.float() if tensor.is_floating_point() else tensor
    missing = {"embed_tokens.weight", "lm_head.weight"} - set(state)
    state.update({k: v.float() for k, v in _shared_from_target(target, missing).items()})
    model.load_state_dict(state, strict=True)
    d2t = state.get("d2t")
    return model.to(device).eval(), (d2t.to(device) if d2t is not None else None)


def score(draft, d2t, capture: Capture, capture_ids, k: int):
    """Per prompt: matched[k] (positions whose first j+1 steps were all right) and the
    number of positions scored. Returns (matched [prompts, k], positions [prompts])."""
    import torch

    pick = [capture.layers.index(i) for i in capture_ids]
    device = next(draft.parameters()).device
    matched, positions = torch.zeros(len(capture.sequences), k), torch.zeros(len(capture.sequences))
    with torch.no_grad():
        for p, (prompt_len, seq, states) in enumerate(capture.sequences):
            seq = seq.to(device)
            n = len(seq) - 1 - k  # step j at position t reads token t+1+j, predicts t+2+j
            if n <= prompt_len - 1:
                continue
            aux = states[:n, pick].flatten(1).float().to(device)[None]
            steps = draft.unroll(seq[1 : n + k][None], draft.combine(aux),
                                 torch.arange(n, device=device)[None], k)
            in_a_row = torch.ones(n, dtype=torch.bool, device=device)
            for j, (normed, _) in enumerate(steps):
                choice = draft.draft_logits(normed)[0].argmax(-1)
                if d2t is not None:
                    choice = choice + d2t[choice]
                in_a_row &= choice == seq[2 + j : 2 + j + n]
                matched[p, j] = in_a_row[prompt_len - 1:].sum().item()
            positions[p] = n - (prompt_len - 1)
    return matched, positions


def acceptance(matched, positions) -> tuple[float, list[float]]:
    """(acceptance length, per-position rates) pooled over prompts."""
    total = float(positions.sum())
    by_position = (matched.sum(0) / total).tolist() if total else [0.0] * matched.shape[1]
    return 1 + sum(by_position), by_position


def per_prompt(matched, positions) -> list[float | None]:
    """Each prompt's offline acceptance length (its own positions pooled); None where it
    had no position to score."""
    return [1 + float(matched[p].sum()) / float(positions[p]) if positions[p] > 0 else None
            for p in range(len(positions))]
