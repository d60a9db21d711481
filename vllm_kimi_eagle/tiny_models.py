"""Tiny Kimi-shaped models, built and trained on the CPU in a few minutes, cached on disk.

``build_tiny_models(folder)`` writes:

- ``target/``: a DeepSeek-V3/Kimi layout model (MoE + MLA, ``model_type: kimi_k2``) with
  its own word-level tokenizer and chat template, trained on ``tiny_corpus`` text until
  its greedy choices are confident. ``kv_lora_rank`` 512 and ``qk_rope_head_dim`` 64
  because vLLM's CPU MLA kernel accepts only those.
- ``draft-*/``: one-layer MLA EAGLE3 drafts distilled on the target's own captured hidden
  states with the pure-PyTorch reference (``reference.py``), embedding and LM head the
  target's (frozen), written in the lightseekorg layout and in every variant the field
  has (see ``DRAFT_VARIANTS``).

The drafts are deliberately as weak as real ones. Fully trained, a draft of this
rule-driven text reaches 3.75 of 4.0 at k=3, where a whole layer of misplaced capture
costs 0.17 and a pruned vocabulary nothing; real Kimi drafts sit at 2.3-3.2 with
per-position acceptance falling from about 0.6-0.85 to 0.25-0.5. ``DRAFT_STEPS`` stops
the distillation where the base draft serves at about 2.8 ([0.79, 0.59, 0.38] offline at
builder v4), so losses show. The target stays fully trained and float32: its greedy
margins (median top-1 minus top-2 probability 0.99) keep lossless comparisons exact.

Deterministic for a given builder version and seed; nothing is downloaded. The cache
folder is keyed by ``BUILDER_VERSION``: bump it whenever the output would change. The
trained target, the expensive part, is also kept on its own, keyed by
``TARGET_VERSION`` (bump it whenever the target or its tokenizer would change), so a
builder change that touches only the drafts does not train the target again.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import shutil
import sys
import time

BUILDER_VERSION = 4
TARGET_VERSION = 1
SEED = 20261121
CACHE_ENV = "VLLM_KIMI_EAGLE_TINY_DIR"

# The target. Only kv_lora_rank and qk_rope_head_dim are fixed by the CPU MLA kernel.
TARGET_LAYERS = 6
ROPE = {
    "rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0,
    "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 1.0,
    "beta_fast": 1.0, "beta_slow": 1.0,
}
MLA_DIMS = {
    "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
    "q_lora_rank": 64, "kv_lora_rank": 512, "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 64, "v_head_dim": 64, "rms_norm_eps": 1e-6,
}
TARGET_CONFIG = {
    **MLA_DIMS,
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2", "vocab_size": 512,
    "intermediate_size": 512, "moe_intermediate_size": 128,
    "num_hidden_layers": TARGET_LAYERS, "n_shared_experts": 1, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
    "routed_scaling_factor": 1.0, "norm_topk_prob": True,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid",
    "max_position_embeddings": 2048, "hidden_act": "silu", "tie_word_embeddings": False,
    "bos_token_id": 2, "eos_token_id": 3, "pad_token_id": 0,
    "dtype": "float32", "torch_dtype": "float32",
}
# Captured target layers in vLLM's convention (input of layer N = HF hidden_states[N]),
# placed like Kimi's (2, 30, 58) of 61: early, middle, late.
AUX_LAYER_IDS = [2, 3, 5]
# A second capture set, whose output-of ids [2, 3, 4] do not start at 1 (issue 10).
LATE_LAYER_IDS = [3, 4, 5]
# Distillation steps of every draft: where the base draft lands at real drafts' acceptance
# (offline estimate at k=3 on 16 prompts: 40 steps 2.30, 50 steps 2.76, 60 steps 3.12;
# 100 steps, builder v3, 3.75).
DRAFT_STEPS = 50


@dataclasses.dataclass(frozen=True)
class TrainedDraft:
    """One draft the builder trains: its EAGLE3 flavour, the target layers it reads (vLLM's
    convention) and the config.json fields that differ from DRAFT_CONFIG."""

    flavour: str  # "eagle3", or "eagle3.1" (fc_norm + norm_output)
    capture: tuple[int, ...]
    config: tuple[tuple[str, object], ...] = ()
    # True: embed_tokens and lm_head are the target's, frozen (possible only at the
    # target's hidden size); False: the draft learns its own from a slice of the target's.
    target_vocab_weights: bool = True
    steps: int = DRAFT_STEPS


# A draft narrower than the target (its fc maps 3 x 256 target features to 128).
NARROW = (("hidden_size", 128), ("intermediate_size", 256), ("target_hidden_size", 256))
TRAINED = {
    "eagle3": TrainedDraft("eagle3", tuple(AUX_LAYER_IDS)),
    "eagle3.1": TrainedDraft("eagle3.1", tuple(AUX_LAYER_IDS)),
    "eagle3-late": TrainedDraft("eagle3", tuple(LATE_LAYER_IDS)),
    "eagle3-norm-before-residual": TrainedDraft(
        "eagle3", tuple(AUX_LAYER_IDS), config=(("norm_before_residual", True),)),
    "eagle3-narrow": TrainedDraft("eagle3", tuple(AUX_LAYER_IDS), config=NARROW,
                                  target_vocab_weights=False, steps=2 * DRAFT_STEPS),
}
DRAFT_CONFIG = {
    **MLA_DIMS,
    "architectures": ["Eagle3DeepseekV2ForCausalLM"],
    "model_type": "kimi_k2",
    "intermediate_size": 512, "num_hidden_layers": 1, "hidden_act": "silu",
    "max_position_embeddings": 2048, "rope_theta": ROPE["rope_theta"],
    "rope_scaling": {k: v for k, v in ROPE.items() if k not in ("rope_type", "rope_theta")}
    | {"type": "yarn"},
    "tie_word_embeddings": False, "torch_dtype": "float32",
    "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS,
        "use_aux_hidden_state": True,
        "use_input_layernorm_in_first_layer": True,
        "use_last_layernorm": True,
        "use_mtp_layernorm": False,
    },
}
# Seeds of the drafts' initial weights: SEED plus this (0 for those not named).
DRAFT_SEED_OFFSETS = {"eagle3.1": 1, "eagle3-norm-before-residual": 2, "eagle3-narrow": 3}
# The pruned draft's vocabulary: the most frequent target ids in the training windows, of
# the 265 the corpus uses. 192 leaves out 6 of the 512 tokens the target generates on the
# tests' prompts (1.2%; with 224 or more it leaves out none and pruning costs nothing).
PRUNED_VOCAB = 192
USER_TOKEN_ID = 4  # "<|user|>" in tiny_corpus.vocabulary()
TTT_STEPS = 3


@dataclasses.dataclass(frozen=True)
class DraftVariant:
    """One draft folder: which trained draft it holds and how it is written."""

    name: str
    trained: str = "eagle3"  # a key of TRAINED
    layer_prefix: str = "layers.0."
    embed_tokens: bool = True
    lm_head: bool = True
    pruned_vocab: bool = False
    shards: int = 1
    dtype: str = "float32"
    # "input-of" writes the captured ids (vLLM's convention) in eagle_config;
    # "output-of" writes them minus one, as SpecForge/TorchSpec/Model-Optimizer do (the
    # same tensors); "explicit-input-of" writes them at the top level and says so with
    # eagle_aux_hidden_state_layer_ids_convention; "as-exported": as the export's tool
    # writes them (see ``export``).
    layer_ids: str = "input-of"
    # Written as a training tool writes its export (trainer_exports.WRITERS); the
    # layout fields above then do not apply.
    export: str | None = None
    # Model-Optimizer export only: the id list in the order written (a set to the tool).
    written_order: tuple[int, ...] | None = None


DRAFT_VARIANTS = (
    DraftVariant("draft"),
    DraftVariant("draft-eagle3.1", trained="eagle3.1"),
    DraftVariant("draft-midlayer", layer_prefix="midlayer."),
    DraftVariant("draft-shared", embed_tokens=False, lm_head=False),
    DraftVariant("draft-pruned", pruned_vocab=True),
    DraftVariant("draft-sharded-bf16", shards=3, dtype="bfloat16"),
    DraftVariant("draft-output-of", layer_ids="output-of"),
    # The base draft as each training tool exports it (issue 10).
    DraftVariant("draft-modelopt", export="modelopt", layer_ids="as-exported"),
    DraftVariant("draft-torchspec", export="torchspec", layer_ids="as-exported"),
    DraftVariant("draft-torchspec-vllm", export="torchspec-vllm", layer_ids="as-exported"),
    DraftVariant("draft-specforge", export="specforge", layer_ids="as-exported"),
    # A draft trained on LATE_LAYER_IDS, exported by Model-Optimizer with its output-of
    # ids [2, 3, 4] written out of order, and the same weights with explicit ids.
    DraftVariant("draft-late-modelopt", trained="eagle3-late", export="modelopt",
                 layer_ids="as-exported", written_order=(4, 2, 3)),
    DraftVariant("draft-late-explicit", trained="eagle3-late", layer_ids="explicit-input-of"),
    # The two options no published Kimi draft uses yet (issue 12), each trained on its own.
    DraftVariant("draft-norm-before-residual", trained="eagle3-norm-before-residual"),
    DraftVariant("draft-narrow", trained="eagle3-narrow"),
)
# Drafts trained on their own (not the base draft's weights in another layout or export).
SEPARATELY_TRAINED = ("draft-eagle3.1", "draft-norm-before-residual", "draft-narrow")
TRAINING = {
    "target_steps": 400, "target_batch": 16, "target_seq": 64, "target_lr": 3e-3,
    "draft_batch": 16, "draft_seq": 64, "draft_lr": 3e-3,
    "draft_windows": 512,
}


def default_cache_dir() -> str:
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "vllm-kimi-eagle"
    )
    return os.path.join(root, f"tiny-v{BUILDER_VERSION}")


def target_cache_dir(folder: str) -> str:
    """Where the trained target of ``TARGET_VERSION`` is kept, next to the models folder."""
    return os.path.join(os.path.dirname(os.path.abspath(folder)), f"target-v{TARGET_VERSION}")


def is_built(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "BUILT.json"))


def ensure_tiny_models(folder: str | None = None, progress: bool = True) -> str:
    """The folder of the tiny models, built first if missing (safe across processes)."""
    folder = folder or default_cache_dir()
    if is_built(folder):
        return folder
    os.makedirs(os.path.dirname(os.path.abspath(folder)), exist_ok=True)
    with open(folder.rstrip("/") + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_built(folder):
            build_tiny_models(folder, progress=progress)
    return folder


# ---- building ------------------------------------------------------------------------
def build_tiny_models(folder: str, progress: bool = True) -> dict:
    """Build everything into ``folder`` from scratch; returns the build summary."""
    import torch

    from tqdm import tqdm

    start = time.time()
    tmp = folder.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    torch.manual_seed(SEED)
    threads = torch.get_num_threads()
    cached_target = target_cache_dir(folder)
    train = not is_built(cached_target)
    total = TRAINING["target_steps"] * train + sum(d.steps for d in TRAINED.values()) + 3
    bar = tqdm(total=total, desc="tiny Kimi models", unit="step", disable=not progress,
               file=sys.stderr)
    try:
        tokenizer = write_tokenizer(os.path.join(tmp, "target"))
        if train:
            target, target_summary = train_target(tokenizer, bar)
            _keep_target(target, target_summary, tokenizer, cached_target)
        else:
            target, target_summary = load_target(cached_target)
        save_target(target, os.path.join(tmp, "target"))
        summary = {"builder_version": BUILDER_VERSION, "seed": SEED, "target": target_summary}
        drafts, data = {}, {}
        generations = greedy_generations(target, tokenizer)
        for name, trained in TRAINED.items():
            if trained.capture not in data:
                data[trained.capture] = capture_training_data(target, tokenizer, trained.capture)
            drafts[name], summary[name] = train_draft(target, data[trained.capture], name, bar)
            summary[name]["offline_k3"] = offline_acceptance(
                target, drafts[name], generations, trained.capture)
        bar.update(1)
        pruned = pruned_vocab_ids(data[tuple(AUX_LAYER_IDS)]["tokens"])
        for variant in DRAFT_VARIANTS:
            write_draft(drafts[variant.trained], variant, os.path.join(tmp, variant.name), pruned,
                        target.config)
        bar.update(2)
    finally:
        bar.close()
    from vllm_kimi_eagle.tiny_k25 import write_k25_target  # K2.5-shaped target (issue 13)

    write_k25_target(os.path.join(tmp, "target"), os.path.join(tmp, "target-k25"))
    summary["seconds"] = round(time.time() - start, 1)
    summary["threads"] = threads
    with open(os.path.join(tmp, "BUILT.json"), "w") as f:
        json.dump(summary, f, indent=2)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return summary


def write_tokenizer(folder: str):
    """A word-level fast tokenizer over tiny_corpus.vocabulary(), with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast

    from vllm_kimi_eagle import tiny_corpus

    vocab = {word: i for i, word in enumerate(tiny_corpus.vocabulary())}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", bos_token="<|bos|>",
        eos_token="<|eos|>", model_max_length=TARGET_CONFIG["max_position_embeddings"],
    )
    tokenizer.chat_template = tiny_corpus.CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return tokenizer


def _target_model():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    fields = {k: v for k, v in TARGET_CONFIG.items()
              if k not in ("architectures", "model_type", "topk_method", "scoring_func",
                           "dtype", "torch_dtype")}
    config = DeepseekV3Config(**fields, rope_parameters=dict(ROPE))
    return DeepseekV3ForCausalLM(config)


def _token_stream(tokenizer, seed: int, chats: int):
    import torch

    from vllm_kimi_eagle import tiny_corpus

    ids = []
    for text in tiny_corpus.training_text(seed, chats):
        ids += tokenizer(text, add_special_tokens=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def _windows(stream, count: int, length: int, generator):
    """Random windows of the token stream, half of them starting at a chat's start."""
    import torch

    chat_starts = (stream[: len(stream) - length - 1] == USER_TOKEN_ID).nonzero().flatten()
    starts = torch.randint(0, len(stream) - length - 1, (count,), generator=generator)
    aligned = chat_starts[torch.randint(0, len(chat_starts), (count,), generator=generator)]
    starts = torch.where(torch.arange(count) % 2 == 0, aligned, starts)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])


def train_target(tokenizer, bar):
    """Train the tiny target on the synthetic chats; returns (model, summary)."""
    import torch

    t = TRAINING
    model = _target_model()
    stream = _token_stream(tokenizer, SEED, 1500)
    g = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=t["target_lr"], weight_decay=0.0)
    sched = _cosine(opt, t["target_steps"])
    model.train()
    for _ in range(t["target_steps"]):
        batch = _windows(stream, t["target_batch"], t["target_seq"] + 1, g)
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1]).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.update(1)
        bar.set_postfix(stage="target", loss=f"{loss.item():.3f}")
    model.eval()
    held_out = _windows(_token_stream(tokenizer, SEED + 1, 100), 32, t["target_seq"], g)
    with torch.no_grad():
        logits = model(input_ids=held_out).logits
    probs = logits.softmax(-1)
    top2 = probs.topk(2, dim=-1).values
    accuracy = (logits[:, :-1].argmax(-1) == held_out[:, 1:]).float().mean().item()
    summary = {
        "final_loss": round(loss.item(), 4),
        "held_out_next_token_accuracy": round(accuracy, 4),
        "median_top1_minus_top2_prob": round((top2[..., 0] - top2[..., 1]).median().item(), 4),
    }
    return model, summary


def _cosine(opt, steps: int):
    import torch

    warmup = max(1, steps // 20)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(i, steps) / steps))
    )


def _keep_target(model, summary: dict, tokenizer, folder: str) -> None:
    """Write the trained target to its own cache (``target_cache_dir``), atomically."""
    tmp = folder.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    save_target(model, tmp)
    tokenizer.save_pretrained(tmp)
    with open(os.path.join(tmp, "BUILT.json"), "w") as f:
        json.dump({"target_version": TARGET_VERSION, "seed": SEED, "target": summary}, f, indent=2)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def load_target(folder: str):
    """The kept trained target and its training summary."""
    from transformers import DeepseekV3ForCausalLM

    model = DeepseekV3ForCausalLM.from_pretrained(folder, config=_target_model().config)
    with open(os.path.join(folder, "BUILT.json")) as f:
        return model.eval(), json.load(f)["target"]


def save_target(model, folder: str) -> None:
    """save_pretrained, then config.json in the Kimi layout vLLM expects."""
    model.save_pretrained(folder, safe_serialization=True)
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update({k: TARGET_CONFIG[k] for k in ("architectures", "model_type", "topk_method",
                                                  "scoring_func", "dtype", "torch_dtype")})
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def capture_training_data(target, tokenizer, capture_ids=AUX_LAYER_IDS) -> dict:
    """Token windows, the target's captured aux states and its greedy next tokens."""
    import torch

    t = TRAINING
    g = torch.Generator().manual_seed(SEED + 2)
    tokens = _windows(_token_stream(tokenizer, SEED + 3, 1200), t["draft_windows"],
                      t["draft_seq"] + TTT_STEPS, g)
    aux, greedy = [], []
    with torch.no_grad():
        for chunk in tokens.split(32):
            out = target(input_ids=chunk, output_hidden_states=True)
            aux.append(torch.cat([out.hidden_states[i] for i in capture_ids], dim=-1))
            greedy.append(out.logits.argmax(-1))
    return {"tokens": tokens, "aux": torch.cat(aux), "greedy": torch.cat(greedy)}


def train_draft(target, data: dict, name: str, bar):
    """Distil the draft ``TRAINED[name]`` on the captured data with TTT; returns
    (model, summary)."""
    import torch

    from vllm_kimi_eagle.reference import ReferenceDraft

    t = TRAINING
    from vllm_kimi_eagle.draft_spec import spec_from_config

    trained = TRAINED[name]
    spec = spec_from_config(draft_config(DraftVariant(name, trained=name)))
    rope = dict(ROPE)
    torch.manual_seed(SEED + DRAFT_SEED_OFFSETS.get(name, 0))
    draft = ReferenceDraft(spec, rope)
    width = spec.hidden_size
    draft.embed_tokens.weight.data.copy_(target.model.embed_tokens.weight.data[:, :width])
    draft.lm_head.weight.data.copy_(target.lm_head.weight.data[:, :width])
    if trained.target_vocab_weights:
        for frozen in (draft.embed_tokens.weight, draft.lm_head.weight):
            frozen.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=t["draft_lr"], weight_decay=0.0)
    sched = _cosine(opt, trained.steps)
    g = torch.Generator().manual_seed(SEED + 4)
    T = t["draft_seq"]
    n = data["tokens"].shape[0]
    positions = torch.arange(T).expand(t["draft_batch"], T)
    draft.train()
    for _ in range(trained.steps):
        idx = torch.randint(0, n, (t["draft_batch"],), generator=g)
        tokens, aux, greedy = data["tokens"][idx], data["aux"][idx], data["greedy"][idx]
        # Step j at index t: input token t+j, target's choice after token t+j.
        outs = draft.unroll(tokens[:, 1:], draft.combine(aux[:, :T]), positions, TTT_STEPS)
        loss = 0.0
        for j, (out, _) in enumerate(outs):
            logits = draft.draft_logits(out)
            labels = greedy[:, 1 + j : 1 + j + T]
            loss = loss + torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
            ) * (0.8**j)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        bar.update(1)
        bar.set_postfix(stage=name, loss=f"{loss.item():.3f}")
    draft.eval()
    with torch.no_grad():
        idx = torch.arange(min(64, n))
        outs = draft.unroll(data["tokens"][idx, 1:], draft.combine(data["aux"][idx, :T]),
                            torch.arange(T).expand(len(idx), T), TTT_STEPS)
        accs = [
            round((draft.draft_logits(o).argmax(-1) == data["greedy"][idx, 1 + j : 1 + j + T])
                  .float().mean().item(), 4)
            for j, (o, _) in enumerate(outs)
        ]
    return draft, {"final_loss": round(loss.item(), 4), "teacher_forced_accuracy_by_step": accs}


def greedy_generations(target, tokenizer, prompts: int = 16, new_tokens: int = 64) -> list:
    """(prompt length, prompt + the target's greedy continuation) of held-out prompts."""
    import torch

    from vllm_kimi_eagle import tiny_corpus

    out = []
    with torch.no_grad():
        for instruction in tiny_corpus.demo_prompts(prompts, seed=4321):
            ids = tokenizer(tiny_corpus.render(instruction), add_special_tokens=False)["input_ids"]
            seq = torch.tensor(ids)
            for _ in range(new_tokens):
                seq = torch.cat([seq, target(input_ids=seq[None]).logits[0, -1:].argmax(-1)])
            out.append((len(ids), seq))
    return out


def offline_acceptance(target, draft, generations, capture, k: int = TTT_STEPS) -> dict:
    """Acceptance the draft would reach at ``k`` speculative tokens over the target's own
    greedy continuations: at every generated position, how many of the draft's chained
    proposals match the target in a row (step 0 reads the target's captured states, step
    j its own previous output, as in serving). An estimate for the build summary: vLLM
    counts only at verification boundaries."""
    import torch

    matched, positions = torch.zeros(k), 0
    with torch.no_grad():
        for prompt_len, seq in generations:
            out = target(input_ids=seq[None], output_hidden_states=True)
            aux = torch.cat([out.hidden_states[i] for i in capture], dim=-1)
            greedy = out.logits[0].argmax(-1)
            T = len(seq) - k
            inputs = torch.cat([seq[1:], seq.new_zeros(k)])[None, : T + k - 1]
            steps = draft.unroll(inputs, draft.combine(aux[:, :T]), torch.arange(T)[None], k)
            in_a_row = torch.ones(T, dtype=torch.bool)
            for j, (normed, _) in enumerate(steps):
                in_a_row &= draft.draft_logits(normed)[0].argmax(-1) == greedy[1 + j : 1 + j + T]
                matched[j] += in_a_row[prompt_len - 1 :].sum()
            positions += T - (prompt_len - 1)
    by_position = (matched / positions).tolist()
    return {"acceptance_length": round(1 + sum(by_position), 3),
            "acceptance_by_position": [round(p, 3) for p in by_position]}


def pruned_vocab_ids(tokens):
    """The PRUNED_VOCAB most frequent target ids in the training windows, sorted."""
    import torch

    counts = torch.bincount(tokens.flatten(), minlength=TARGET_CONFIG["vocab_size"]).float()
    counts += torch.arange(len(counts)).flip(0) * 1e-6  # deterministic tie-break: lower id first
    return counts.topk(PRUNED_VOCAB).indices.sort().values


def draft_config(variant: DraftVariant) -> dict:
    """The config.json of a draft variant (also what training builds the draft from)."""
    config = dict(DRAFT_CONFIG, vocab_size=TARGET_CONFIG["vocab_size"],
                  draft_vocab_size=PRUNED_VOCAB if variant.pruned_vocab else TARGET_CONFIG["vocab_size"],
                  torch_dtype=variant.dtype)
    trained = TRAINED[variant.trained]
    if trained.flavour == "eagle3.1":
        config.update(fc_norm=True, norm_output=True)
    config.update(dict(trained.config))
    capture = list(trained.capture)
    written = [i - 1 for i in capture] if variant.layer_ids == "output-of" else capture
    config["eagle_config"] = dict(config["eagle_config"], eagle_aux_hidden_state_layer_ids=written)
    if variant.layer_ids == "explicit-input-of":
        from vllm_kimi_eagle.layer_ids import CONVENTION_KEY, IDS_KEY

        config.update({IDS_KEY: list(capture), CONVENTION_KEY: "input-of"})
    return config


def write_export(tensors: dict, variant: DraftVariant, folder: str, target_config) -> None:
    """The draft's tensors and config as the variant's training tool exports them."""
    from safetensors.torch import save_file

    from vllm_kimi_eagle import trainer_exports

    options = {"written_order": list(variant.written_order)} if variant.written_order else {}
    config, out, metadata = trainer_exports.export(
        variant.export, tensors,
        draft_config(dataclasses.replace(variant, export=None, layer_ids="input-of")),
        target_config, list(TRAINED[variant.trained].capture), **options)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file({k: v.contiguous() for k, v in out.items()},
              os.path.join(folder, "model.safetensors"), metadata={"format": "pt", **metadata})


def write_draft(draft, variant: DraftVariant, folder: str, pruned_ids, target_config=None) -> None:
    """Write a trained reference draft in the layout the variant describes."""
    import torch
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    tensors = {k: v.detach().clone() for k, v in draft.state_dict().items()}
    if variant.export:
        write_export(tensors, variant, folder, target_config or TARGET_CONFIG)
        return
    if variant.pruned_vocab:
        tensors["lm_head.weight"] = tensors["lm_head.weight"][pruned_ids].clone()
        tensors["d2t"] = (pruned_ids - torch.arange(len(pruned_ids))).to(torch.long)
        t2d = torch.zeros(TARGET_CONFIG["vocab_size"], dtype=torch.bool)
        t2d[pruned_ids] = True
        tensors["t2d"] = t2d
    if not variant.embed_tokens:
        del tensors["embed_tokens.weight"]
    if not variant.lm_head:
        del tensors["lm_head.weight"]
    dtype = getattr(torch, variant.dtype)
    tensors = {
        (variant.layer_prefix + k[len("layers.0."):] if k.startswith("layers.0.") else k):
        (v.to(dtype) if v.is_floating_point() else v).contiguous()
        for k, v in tensors.items()
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(draft_config(variant), f, indent=2)
    if variant.shards == 1:
        save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(tensors)
    weight_map = {}
    for shard in range(variant.shards):
        file = f"model-{shard + 1:05d}-of-{variant.shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[shard :: variant.shards]}
        save_file(part, os.path.join(folder, file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
