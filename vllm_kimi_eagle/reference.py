"""Pure-PyTorch reference of the one-layer MLA EAGLE3 draft: the trainer and the oracle.

Readable top to bottom, no vLLM. Parameter names are the checkpoint's canonical tensor
names (``layers.0.self_attn.q_a_proj.weight`` ...), so ``state_dict()`` is a checkpoint.

The forward step (shared notes, "The forward step"):

1. ``e = embed(token)``
2. ``h = fc(concat of captured target states)`` (each chunk RMS-normalised first with
   ``fc_norm``) at the first step, the previous step's aux output afterwards
3. ``residual = h`` (``hidden_norm(h)`` with ``norm_before_residual``)
4. MLA attention over ``concat[input_layernorm(e), hidden_norm(h)]``, embedding first
5. ``r1 = attn + residual``; ``r2 = mlp(post_attention_layernorm(r1)) + r1``
6. ``out = norm(r2)`` feeds the LM head; the aux output is ``r2``, or ``out`` with
   ``norm_output``
7. with a pruned vocabulary, draft id ``i`` is target id ``i + d2t[i]``

Attention supports test-time-training (TTT) unrolling as EAGLE3 trains it: the query of
step j at index t sees step-1 keys at indices <= t and the keys of steps 2..j at index t.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vllm_kimi_eagle.draft_spec import DraftSpec


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).to(dtype)


def yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope_tables(rope: dict, rotary_dim: int, positions: torch.Tensor):
    """cos, sin for GPT-J (interleaved) rotary embedding; DeepSeek yarn when configured."""
    base = float(rope.get("rope_theta", 10000.0))
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim
    inv_freq = 1.0 / base**exponents
    scale = 1.0
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
        factor = float(rope["factor"])
        original = rope["original_max_position_embeddings"]
        beta_fast, beta_slow = rope.get("beta_fast", 32), rope.get("beta_slow", 1)

        def correction_dim(rotations):
            return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (
                2 * math.log(base)
            )

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), rotary_dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float) - low) / (high - low)).clamp(0, 1)
        extrapolation_weight = 1 - ramp
        inv_freq = inv_freq / factor * (1 - extrapolation_weight) + inv_freq * extrapolation_weight
        scale = yarn_mscale(factor, rope.get("mscale", 1)) / yarn_mscale(
            factor, rope.get("mscale_all_dim", 0)
        )
    freqs = positions.float()[..., None] * inv_freq
    cos = (freqs.cos() * scale).repeat_interleave(2, dim=-1)
    sin = (freqs.sin() * scale).repeat_interleave(2, dim=-1)
    return cos, sin


def softmax_scale(rope: dict, qk_head_dim: int) -> float:
    """1/sqrt(d), times DeepSeek yarn's mscale(mscale_all_dim)^2 (as vLLM applies it)."""
    scale = qk_head_dim**-0.5
    is_yarn = rope.get("rope_type", rope.get("type", "default")) not in ("default", None)
    if is_yarn and rope.get("attention_factor") != 1.0:
        m = yarn_mscale(float(rope["factor"]), float(rope.get("mscale_all_dim", 0) or 0))
        scale *= m * m
    return scale


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., ::2], x[..., 1::2]
    rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return x * cos + rotated * sin


class MLAAttention(nn.Module):
    def __init__(self, spec: DraftSpec, rope: dict):
        super().__init__()
        h2, s = 2 * spec.hidden_size, spec
        self.spec, self.rope = spec, rope
        qk_head = s.qk_nope_head_dim + s.qk_rope_head_dim
        if s.q_lora_rank is None:
            self.q_proj = nn.Linear(h2, s.num_heads * qk_head, bias=False)
        else:
            self.q_a_proj = nn.Linear(h2, s.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(s.q_lora_rank, s.rms_norm_eps)
            self.q_b_proj = nn.Linear(s.q_lora_rank, s.num_heads * qk_head, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h2, s.kv_lora_rank + s.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(s.kv_lora_rank, s.rms_norm_eps)
        self.kv_b_proj = nn.Linear(
            s.kv_lora_rank, s.num_heads * (s.qk_nope_head_dim + s.v_head_dim), bias=False
        )
        self.o_proj = nn.Linear(s.num_heads * s.v_head_dim, spec.hidden_size, bias=False)
        self.scale = softmax_scale(rope, qk_head)

    def project(self, x: torch.Tensor, positions: torch.Tensor):
        """Queries, keys, values [B, T, heads, dim] for inputs x [B, T, 2*hidden]."""
        s = self.spec
        B, T, _ = x.shape
        if s.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, T, s.num_heads, s.qk_nope_head_dim + s.qk_rope_head_dim)
        q_nope, q_pe = q.split([s.qk_nope_head_dim, s.qk_rope_head_dim], dim=-1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([s.kv_lora_rank, s.qk_rope_head_dim], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(
            B, T, s.num_heads, s.qk_nope_head_dim + s.v_head_dim
        )
        k_nope, v = kv.split([s.qk_nope_head_dim, s.v_head_dim], dim=-1)
        cos, sin = rope_tables(self.rope, s.qk_rope_head_dim, positions)
        cos, sin = cos[:, :, None, :].to(x.dtype), sin[:, :, None, :].to(x.dtype)
        q_pe = rotate_interleaved(q_pe, cos, sin)
        k_pe = rotate_interleaved(k_pe[:, :, None, :], cos, sin).expand(-1, -1, s.num_heads, -1)
        return torch.cat([q_nope, q_pe], -1), torch.cat([k_nope, k_pe], -1), v

    def attend(self, q, keys, values):
        """keys[0]/values[0]: step-1 (causal over indices); the rest: same index only."""
        T = q.shape[1]
        scores = [torch.einsum("bthd,bshd->bhts", q, keys[0]) * self.scale]
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        scores[0] = scores[0].masked_fill(~causal, float("-inf"))
        for k in keys[1:]:
            scores.append(torch.einsum("bthd,bthd->bht", q, k)[..., None] * self.scale)
        probs = torch.cat(scores, dim=-1).float().softmax(-1).to(q.dtype)
        out = torch.einsum("bhts,bshd->bthd", probs[..., :T], values[0])
        for i, v in enumerate(values[1:]):
            out = out + probs[..., T + i].permute(0, 2, 1)[..., None] * v
        B = q.shape[0]
        return self.o_proj(out.reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, spec: DraftSpec, rope: dict):
        super().__init__()
        h, eps = spec.hidden_size, spec.rms_norm_eps
        self.spec = spec
        self.input_layernorm = RMSNorm(h, eps)
        self.hidden_norm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.self_attn = MLAAttention(spec, rope)
        self.mlp = MLP(h, spec.intermediate_size)


class ReferenceDraft(nn.Module):
    """The MLA EAGLE3 draft in plain PyTorch; state_dict() keys are checkpoint names."""

    def __init__(self, spec: DraftSpec, rope: dict | None = None):
        super().__init__()
        self.spec, self.rope = spec, dict(rope or {"rope_type": "default", "rope_theta": 10000.0})
        h, th = spec.hidden_size, spec.target_hidden_size
        self.embed_tokens = nn.Embedding(spec.vocab_size, h)
        self.layers = nn.ModuleList([DecoderLayer(spec, self.rope)])
        self.fc = nn.Linear(spec.num_aux * th, h, bias=False)
        if spec.fc_norm:
            self.fc_norm = nn.ModuleList(RMSNorm(th, spec.rms_norm_eps) for _ in range(spec.num_aux))
        self.norm = RMSNorm(h, spec.rms_norm_eps)
        self.lm_head = nn.Linear(h, spec.draft_vocab_size, bias=False)
        if spec.pruned_vocab:
            self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))

    def combine(self, aux: torch.Tensor) -> torch.Tensor:
        """fc over the concatenated captured target states [..., num_aux * target_hidden]."""
        if self.spec.fc_norm:
            chunks = aux.chunk(self.spec.num_aux, dim=-1)
            aux = torch.cat([norm(c) for norm, c in zip(self.fc_norm, chunks)], dim=-1)
        return self.fc(aux)

    def unroll(self, input_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, steps: int):
        """Run ``steps`` draft steps over whole sequences (TTT), teacher-forced tokens.

        input_ids [B, T + steps - 1]: the token at index t + j - 1 is step j's input at t.
        hidden [B, T, hidden]: fc-combined target states. positions [B, T] of step 1.
        Returns (normed output, aux output) of every step, each [B, T, hidden].
        """
        layer = self.layers[0]
        T = hidden.shape[1]
        keys, values, outs = [], [], []
        for j in range(steps):
            embeds = self.embed_tokens(input_ids[:, j : j + T])
            normed = layer.hidden_norm(hidden)
            residual = normed if self.spec.norm_before_residual else hidden
            x = torch.cat([layer.input_layernorm(embeds), normed], dim=-1)
            q, k, v = layer.self_attn.project(x, positions + j)
            keys.append(k)
            values.append(v)
            r1 = layer.self_attn.attend(q, keys, values) + residual
            r2 = layer.mlp(layer.post_attention_layernorm(r1)) + r1
            out = self.norm(r2)
            hidden = out if self.spec.norm_output else r2
            outs.append((out, hidden))
        return outs

    def draft_logits(self, out: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary."""
        return self.lm_head(out)
