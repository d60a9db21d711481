"""``Eagle3DeepseekV2ForCausalLM``: the one-layer MLA EAGLE3 draft, served by vLLM.

One DeepSeek-style decoder layer (MLA attention over ``[embed, hidden]`` of width
2·hidden, dense MLP) fed by ``fc`` over the target's captured hidden states. The forward
step is written down in ``reference.py`` (the pure-PyTorch twin used for training and as
the numerical oracle); this module is the same math on vLLM's building blocks, with every
option the draft spec reads (Kimi-K3's NoPE and output gate, the eagle_config norm flags).

Checkpoints load without conversion and strictly: see ``checkpoint.py``.

No ``from __future__ import annotations`` here: vLLM's ``support_torch_compile`` reads
the forward's real annotations to find its dynamic arguments.
"""


import copy
import dataclasses
import logging
from collections.abc import Iterable

import torch
from torch import nn
from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.distributed import tensor_model_parallel_all_gather
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.deepseek_v2 import DeepseekV2MLAAttention, DeepseekV2MLP
from vllm.model_executor.models.utils import get_draft_quant_config, maybe_prefix

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.draft import checkpoint, rope_override
from vllm_kimi_eagle.draft.draft_config import (
    DraftConfigError,
    carries_served_key,
    parse_draft_config,
)
from vllm_kimi_eagle.draft.draft_report import draft_report
from vllm_kimi_eagle.draft.draft_source import draft_config_json
from vllm_kimi_eagle.draft.draft_spec import (
    LAYER,
    DraftSpec,
    canonical_name,
    spec_from_config,
)
from vllm_kimi_eagle.draft.quantization import require_plugin_loads
from vllm_kimi_eagle.draft.served_draft import ServedDraft, attached
from vllm_kimi_eagle.serving import top_tokens
from vllm_kimi_eagle.serving.draft_plan import decided_here

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
# Checkpoint tensors that vLLM keeps fused: canonical name part -> (vLLM part, shard).
STACKED_PARAMS = {
    "self_attn.q_a_proj": ("self_attn.fused_qkv_a_proj", 0),
    "self_attn.kv_a_proj_with_mqa": ("self_attn.fused_qkv_a_proj", 1),
    "mlp.gate_proj": ("mlp.gate_up_proj", 0),
    "mlp.up_proj": ("mlp.gate_up_proj", 1),
}
# Canonical names that do not live under `model.` in this module.
TOP_LEVEL_PARAMS = {"lm_head.weight": "lm_head.weight", "d2t": "draft_id_to_target_id"}
# Checkpoint tensors that live elsewhere in vLLM's modules: canonical part -> vLLM part.
MOVED_PARAMS = {"self_attn.g_proj.": "self_attn.mla_attn.g_proj."}


def served_draft(draft_model_config) -> ServedDraft:
    """What the speculative hook decided for this draft (``served_draft.py``); where it
    did not run (a vLLM release it cannot hook), the same decisions, made here from the
    draft folder's config.json. Decisions found on vLLM's config object count only where
    the hook put them (``draft_plan.decided_here``) and the file does not carry the
    channel itself (``parse_draft_config`` refuses such a file)."""
    model = draft_model_config.model
    found = draft_config_json(model, getattr(draft_model_config, "revision", None))
    served = attached(draft_model_config.hf_config)
    if served is not None and decided_here(draft_model_config.hf_config) and (
            found is None or not carries_served_key(found[0])):
        return served
    if found is None:
        raise DraftConfigError(f"{model}: its config.json is neither in a local folder nor "
                               "in the Hugging Face cache.")
    report = draft_report(parse_draft_config(*found), None, target_layers=None,
                          target_hidden=None, target_vocab=None, can_capture_after_last=True)
    return report.served(getattr(draft_model_config.hf_config, "max_position_embeddings",
                                 None))


def attention_config(config, spec: DraftSpec, rope_theta: float | None):
    """The config vLLM's MLA attention is built from: the draft's, and for a NoPE draft a
    copy with plain rope parameters, so that its softmax scale is 1/sqrt(d) without
    yarn's mscale (its rotary embedding is then removed)."""
    if not spec.nope:
        return config
    plain = copy.copy(config)
    plain.rope_parameters = {"rope_type": "default", "rope_theta": rope_theta or 10000.0}
    return plain


class Eagle3MLADecoderLayer(nn.Module):
    """MLA attention over concat[input_layernorm(embed), hidden_norm(h)], then a dense MLP."""

    def __init__(self, vllm_config: VllmConfig, config, spec: DraftSpec, prefix: str,
                 rope_theta: float | None = None, max_positions: int | None = None):
        super().__init__()
        quant_config = get_draft_quant_config(vllm_config)
        h, eps = spec.hidden_size, spec.rms_norm_eps
        self.norm_before_residual = spec.norm_before_residual
        self.self_attn = DeepseekV2MLAAttention(
            vllm_config=vllm_config,
            config=attention_config(config, spec, rope_theta),
            hidden_size=h,
            num_heads=spec.num_heads,
            qk_nope_head_dim=spec.qk_nope_head_dim,
            qk_rope_head_dim=spec.qk_rope_head_dim,
            v_head_dim=spec.v_head_dim,
            q_lora_rank=spec.q_lora_rank,
            kv_lora_rank=spec.kv_lora_rank,
            max_position_embeddings=max_positions or spec.max_position_embeddings,
            cache_config=vllm_config.cache_config,
            quant_config=quant_config,
            prefix=f"{prefix}.self_attn",
            input_size=2 * h,
        )
        if spec.nope:  # Kimi-K3: the rope dims are attended unrotated
            self.self_attn.mla_attn.rotary_emb = None
        if spec.output_gate:  # attention output x sigmoid(g_proj(attention input))
            self.self_attn.mla_attn.g_proj = ReplicatedLinear(
                2 * h, spec.num_heads * spec.v_head_dim, bias=False,
                quant_config=quant_config, prefix=f"{prefix}.self_attn.g_proj")
        self.mlp = DeepseekV2MLP(
            hidden_size=h,
            intermediate_size=spec.intermediate_size,
            hidden_act="silu",  # the only activation spec_from_config accepts
            quant_config=quant_config,
            prefix=f"{prefix}.mlp",
        )
        self.input_layernorm = RMSNorm(h, eps=eps)
        self.hidden_norm = RMSNorm(h, eps=eps) if spec.hidden_norm else nn.Identity()
        self.post_attention_layernorm = RMSNorm(h, eps=eps)

    def forward(self, positions, embeds, hidden_states):
        normed_hidden = self.hidden_norm(hidden_states)
        residual = normed_hidden if self.norm_before_residual else hidden_states
        attn_input = torch.cat([self.input_layernorm(embeds), normed_hidden], dim=-1)
        attn_out = self.self_attn(
            positions=positions, hidden_states=attn_input, llama_4_scaling=None
        )
        mlp_input, residual = self.post_attention_layernorm(attn_out, residual)
        return self.mlp(mlp_input), residual


@support_torch_compile
class Eagle3MLAModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", start_layer_id: int = 0,
                 served: ServedDraft | None = None):
        super().__init__()
        draft_model_config = vllm_config.speculative_config.draft_model_config
        config = draft_model_config.hf_config
        served = served or served_draft(draft_model_config)
        spec = dataclasses.replace(spec_from_config(served.config), nope=served.nope)
        require_plugin_loads(spec.quantization, served.config.source)
        self.spec = spec
        self.embed_tokens = VocabParallelEmbedding(
            spec.vocab_size, spec.hidden_size, prefix=maybe_prefix(prefix, "embed_tokens")
        )
        # The attention layer's name must not collide with the target's layers.
        self.layers = nn.ModuleList(
            [
                Eagle3MLADecoderLayer(
                    vllm_config,
                    config,
                    spec,
                    prefix=maybe_prefix(prefix, f"layers.{start_layer_id}"),
                    rope_theta=served.rope_theta,
                    max_positions=served.max_positions,
                )
            ]
        )
        self.fc = ReplicatedLinear(
            spec.num_aux * spec.target_hidden_size,
            spec.hidden_size,
            bias=False,
            params_dtype=vllm_config.model_config.dtype,
            quant_config=get_draft_quant_config(vllm_config),
            prefix=maybe_prefix(prefix, "fc"),
            return_bias=False,
        )
        self.fc_norm = (
            nn.ModuleList(
                RMSNorm(spec.target_hidden_size, eps=spec.rms_norm_eps)
                for _ in range(spec.num_aux)
            )
            if spec.fc_norm
            else None
        )
        self.norm = RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps) if spec.final_norm else None

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        input_embeds: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if input_embeds is None:
            input_embeds = self.embed_input_ids(input_ids)
        mlp_out, residual = self.layers[0](positions, input_embeds, hidden_states)
        if self.norm is None:  # eagle_config.use_last_layernorm false: no final norm
            out = prenorm = mlp_out + residual
        else:
            out, prenorm = self.norm(mlp_out, residual)
        return out, (out if self.spec.norm_output else prenorm)


class Eagle3DeepseekV2ForCausalLM(vllm_compat.eagle3_draft_base()):
    """The MLA EAGLE3 draft as vLLM's proposer drives it.

    The base class is vLLM's, only for the proposer's isinstance check (see
    vllm_compat.EAGLE3_DRAFT_BASE); nothing of it runs: __init__ goes straight to
    nn.Module and every method the proposer uses is defined here.
    """

    # Set while loading; the proposer shares the target's embedding/lm_head when False.
    has_own_embed_tokens = False
    has_own_lm_head = False
    # Read by vLLM's model loader on the class to match fused layers of quantized
    # checkpoints; ours, not the base's (Llama's names qkv_proj, which we lack).
    packed_modules_mapping = {
        "fused_qkv_a_proj": ["q_a_proj", "kv_a_proj_with_mqa"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    }

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        nn.Module.__init__(self)
        draft_model_config = vllm_config.speculative_config.draft_model_config
        self.config = draft_model_config.hf_config
        self.draft_path = draft_model_config.model
        served = served_draft(draft_model_config)
        rope_override.serve_rope_theta(self.config, served.rope_theta,
                                       served.config.config_rope_theta, logger)
        self.target_vocab_size = vllm_config.model_config.get_vocab_size()
        self.target_hidden_size = vllm_config.model_config.get_hidden_size()
        target_layers = vllm_compat.total_layers(vllm_config.model_config)
        self.model = Eagle3MLAModel(
            vllm_config=vllm_config,
            prefix=maybe_prefix(prefix, "model"),
            start_layer_id=target_layers,
            served=served,
        )
        spec = self.spec = self.model.spec
        self.lm_head = ParallelLMHead(
            spec.draft_vocab_size, spec.hidden_size, prefix=maybe_prefix(prefix, "lm_head")
        )
        self.logits_processor = LogitsProcessor(spec.draft_vocab_size, scale=spec.logit_scale)
        if spec.pruned_vocab:
            self.draft_id_to_target_id = nn.Parameter(
                torch.zeros(spec.draft_vocab_size, dtype=torch.long), requires_grad=False
            )
        else:
            self.draft_id_to_target_id = None
        self.d2t_increasing = True  # set from the loaded d2t
        logger.info(
            "vllm-kimi-eagle: serving the draft %s with the plugin's class "
            "(fc_norm %s, norm_output %s, norm_before_residual %s, %s, output gate %s, "
            "draft vocabulary %d)", self.draft_path, spec.fc_norm, spec.norm_output,
            spec.norm_before_residual, "NoPE" if spec.nope else "RoPE", spec.output_gate,
            spec.draft_vocab_size)

    def embed_input_ids(self, input_ids: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        inputs_embeds: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(input_ids, positions, hidden_states, inputs_embeds)

    def combine_hidden_states(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """fc over the captured target states, each chunk normalised first with fc_norm."""
        if self.model.fc_norm is not None:
            chunks = hidden_states.chunk(self.spec.num_aux, dim=-1)
            hidden_states = torch.cat(
                [norm(chunk) for norm, chunk in zip(self.model.fc_norm, chunks)], dim=-1
            )
        return self.model.fc(hidden_states)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        """Logits over the target vocabulary (draft logits scattered through d2t)."""
        logits = self.logits_processor(self.lm_head, hidden_states)
        if logits is None:
            return None
        return top_tokens.to_target_vocab(
            logits, self.draft_id_to_target_id, self.spec.vocab_size
        )

    def get_top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Greedy draft tokens as target ids, without full-vocabulary logits.

        vLLM's proposer calls this instead of compute_logits().argmax() when
        use_local_argmax_reduction is on (shortcut_policy decides). Each rank takes the
        top of its own LM-head shard; only (value, target id) pairs cross ranks; d2t
        maps the winners only. Same answer as the plain path, ties included (see
        top_tokens). A logit scale other than 1 is applied as the plain path applies
        it: in bf16, scaling can round two logits to one value, and the tie rule decides.
        """
        lm_head = self.lm_head
        logits = lm_head.quant_method.apply(lm_head, hidden_states)
        if self.logits_processor.scale != 1.0:
            logits = logits * self.logits_processor.scale
        shard = lm_head.shard_indices
        values, target_ids = top_tokens.shard_top1(
            logits,
            shard.org_vocab_start_index,
            shard.org_vocab_end_index - shard.org_vocab_start_index,
            self.draft_id_to_target_id,
            self.d2t_increasing,
        )
        if lm_head.tp_size > 1:
            # One float32 all-gather of (value, id) pairs: ids < 2**24 are exact in
            # float32, and CPU collectives do not gather int64.
            pairs = torch.stack([values.float(), target_ids.float()], dim=-1)
            pairs = tensor_model_parallel_all_gather(pairs, dim=-1)
            pairs = pairs.view(pairs.shape[0], lm_head.tp_size, 2)
            target_ids = top_tokens.reduce_top1(pairs[..., 0], pairs[..., 1].long())
        return target_ids

    # ---- weight loading -------------------------------------------------------------
    def _where(self, raw_name: str) -> str:
        """The file that holds a tensor, for error messages."""
        try:
            return checkpoint.read_checkpoint(self.draft_path)[raw_name].file
        except (OSError, KeyError, ValueError):
            return f"the draft checkpoint {self.draft_path}"

    @staticmethod
    def _param_for(canonical: str, params: dict) -> tuple[str, int | None]:
        """vLLM parameter name (and shard id) for a canonical checkpoint tensor name."""
        if canonical in TOP_LEVEL_PARAMS:
            return TOP_LEVEL_PARAMS[canonical], None
        if canonical.startswith(LAYER):
            part = canonical[len(LAYER):]
            for source, (dest, shard) in STACKED_PARAMS.items():
                if part.startswith(source + ".") and f"model.layers.0.{dest}.weight" in params:
                    return f"model.layers.0.{dest}" + part[len(source):], shard
            for source, dest in MOVED_PARAMS.items():
                if part.startswith(source):
                    return "model.layers.0." + dest + part[len(source):], None
        return "model." + canonical, None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        present: set[str] = set()
        problems: list[str] = []
        for raw_name, tensor in weights:
            canonical = canonical_name(raw_name)
            if checkpoint.ignored(canonical):
                continue
            problem = checkpoint.tensor_problem(self.spec, raw_name, tuple(tensor.shape),
                                                tensor.dtype)
            if problem:
                problems.append(f"{self._where(raw_name)}: {problem}")
                continue
            present.add(canonical)
            if canonical == "d2t":
                problems += self._d2t_problems(tensor, raw_name)
                if not self.spec.pruned_vocab:
                    continue  # the identity map of a full-vocabulary draft: nothing to load
            name, shard = self._param_for(canonical, params)
            param = params[name]
            weight_loader = getattr(param, "weight_loader", default_weight_loader)
            if shard is None:
                weight_loader(param, tensor)
            else:
                weight_loader(param, tensor, shard)
        problems += [
            f"{self.draft_path}: {p}"
            for p in checkpoint.missing_tensors(
                self.spec,
                present,
                target_vocab=self.target_vocab_size,
                target_hidden=self.target_hidden_size,
            )
        ]
        if problems:
            raise checkpoint.CheckpointError(
                "the MLA EAGLE3 draft checkpoint does not match its config:\n  - "
                + "\n  - ".join(problems)
            )
        self.d2t_increasing = top_tokens.d2t_is_increasing(self.draft_id_to_target_id)
        self.has_own_embed_tokens = "embed_tokens.weight" in present
        self.has_own_lm_head = "lm_head.weight" in present
        # Shared tensors are filled in by the proposer from the target after loading.
        return set(params)

    def _d2t_problems(self, d2t: torch.Tensor, raw_name: str) -> list[str]:
        """What is wrong with the d2t loaded, by the rule the pre-serve check applies
        (``checkpoint.d2t_problems``)."""
        if d2t.is_floating_point():
            return [
                f"{self._where(raw_name)}: tensor {raw_name!r} has dtype {d2t.dtype}; d2t "
                "holds integer offsets (target id = draft id + d2t). Export it as int64."
            ]
        return [f"{self._where(raw_name)}: {problem}" for problem in checkpoint.d2t_problems(
            d2t.to("cpu", torch.long).tolist(), self.spec, self.target_vocab_size, raw_name)]
