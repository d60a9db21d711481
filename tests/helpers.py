"""Shared test helpers: config-only model folders, fresh Python processes (plain code,
the CLI, one engine) and the engine runs the e2e tests share.

Plugin state (registrations, the MLA check) lives in the process, so every comparison
"with the plugin" vs "without it" runs each side in a fresh process: an engine in a fork
of a process that has imported vLLM and nothing of the plugin (tests/preloaded_vllm.py).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests import engines, preloaded_vllm
from vllm_kimi_eagle.fixtures import variants
from vllm_kimi_eagle.fixtures.tokenizer import write_tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def doc_pages() -> list[str]:
    """README.md, eval/README.md and every page of docs/, the user's documentation."""
    docs = os.path.join(REPO, "docs")
    return [os.path.join(REPO, "README.md"), os.path.join(REPO, "eval", "README.md"),
            *sorted(os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md"))]


def docs_text() -> str:
    """The user's documentation, every page, as one text."""
    texts = []
    for path in doc_pages():
        with open(path) as f:
            texts.append(f.read())
    return "\n".join(texts)


# The commit a model placed in a Hugging Face cache layout is filed under.
HF_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def place_in_hf_cache(cache: str, repo_id: str, folder: str, commit: str = HF_COMMIT) -> str:
    """``folder`` as huggingface_hub leaves a downloaded snapshot: refs/main names the
    commit, and snapshots/COMMIT holds links to the files (here the built files
    themselves rather than blobs)."""
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    snapshot = os.path.join(repo, "snapshots", commit)
    os.makedirs(snapshot)
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            os.symlink(os.path.realpath(path), os.path.join(snapshot, name))
    return snapshot


# The command line tool, as `python -m` runs it (the console script vllm-kimi-eagle).
CLI_MODULE = "vllm_kimi_eagle.tools.cli"

# float32 servers: the GPQA-style prompts are far from the tiny target's training text,
# where its choices can be close; float32 keeps batching noise below those margins.
FP32 = ["--dtype", "float32", "--enforce-eager"]

# The base draft as each training tool exports it (build-tiny, fixtures/trainer_exports.py):
# export folder -> (training tool recognised, capture ids vLLM must use)
EXPORTS = {
    "draft-modelopt": ("Model-Optimizer", [2, 3, 5]),
    "draft-torchspec": ("TorchSpec (native export)", [2, 3, 5]),
    "draft-torchspec-vllm": ("TorchSpec (--vllm export, kimi_k2)", [2, 3, 5]),
    "draft-specforge": ("SpecForge", [2, 3, 5]),
}
# A draft trained on other layers, exported by Model-Optimizer, and the same weights
# given explicit ids.
LATE_EXPORT, LATE_EXPLICIT = "draft-late-modelopt", "draft-late-explicit"
LATE_CAPTURE = [3, 4, 5]

# Environment for child processes: CPU build, small KV cache, quiet progress bars.
BASE_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def write_config_only_models(root: str, draft_overrides: dict | None = None) -> tuple[str, str]:
    """A tiny target (config + tokenizer) and a kimi_k2 MLA draft config, no weights."""
    target = os.path.join(root, "target")
    draft = os.path.join(root, "draft")
    os.makedirs(target, exist_ok=True)
    os.makedirs(draft, exist_ok=True)
    write_tokenizer(target)
    with open(os.path.join(target, "config.json"), "w") as f:
        json.dump(dict(variants.TARGET_CONFIG, rope_parameters=variants.ROPE), f)
    config = variants.draft_config(variants.DRAFT_VARIANTS[0])
    for key, value in (draft_overrides or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    with open(os.path.join(draft, "config.json"), "w") as f:
        json.dump(config, f)
    return target, draft


def run_python(code: str, env: dict | None = None, timeout: int = 600) -> dict:
    """Run ``code`` in a fresh process; it must print one JSON object last."""
    proc = run_process(["-c", textwrap.dedent(code)], env, timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"child process failed (exit {proc.returncode}):\n"
            f"stdout tail:\n{proc.stdout[-3000:]}\nstderr tail:\n{proc.stderr[-5000:]}"
        )
    result = json.loads(lines[-1])
    result["_stderr"] = proc.stderr
    result["_log"] = proc.stdout + proc.stderr  # vLLM logs to stdout
    return result


def run_cli(*args: str, env: dict | None = None,
            timeout: int = 600) -> subprocess.CompletedProcess:
    """``vllm-kimi-eagle ARGS...`` in a fresh process (child environment as
    run_python's); the completed process, with its output as text."""
    return run_process(["-m", CLI_MODULE, *args], env, timeout)


def run_process(argv: list[str], env: dict | None, timeout: float) -> subprocess.CompletedProcess:
    """``python ARGV...`` with this process's environment, BASE_ENV and ``env``, in a fork
    of the preloaded vLLM where the environment allows (tests/preloaded_vllm.py), else in a
    fresh interpreter; its output as text. Past ``timeout`` seconds it is stopped and
    subprocess.TimeoutExpired raised, as subprocess.run does."""
    import tempfile

    full_env = {**os.environ, **BASE_ENV, **(env or {})}
    zygote = _preloaded_for(full_env)
    if zygote is None:
        return subprocess.run([sys.executable, *argv], env=full_env, capture_output=True,
                              text=True, timeout=timeout)
    with tempfile.TemporaryDirectory(prefix="vllm-kimi-eagle-child-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        exit_code = zygote.run(argv, full_env, out, timeout, err_path=err)
        if exit_code is None:
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout)
        with open(out, errors="replace") as o, open(err, errors="replace") as e:
            return subprocess.CompletedProcess([sys.executable, *argv], exit_code, o.read(),
                                               e.read())


ENGINE_CONFIG_PROBE = """
import json
from vllm.engine.arg_utils import EngineArgs
try:
    config = EngineArgs(
        model={target!r},
        speculative_config={{"method": "eagle3", "model": {draft!r}, "num_speculative_tokens": 3}},
        max_model_len=256,
    ).create_engine_config()
except Exception as err:
    print(json.dumps({{"error": f"{{type(err).__name__}}: {{err}}"}}))
else:
    draft = config.speculative_config.draft_model_config
    print(json.dumps({{
        "use_mla": draft.use_mla,
        "target_use_mla": config.model_config.use_mla,
        "inner_model_type": draft.hf_config.model.model_type,
        "architectures": draft.architectures,
        "top_level_layer_ids": getattr(draft.hf_config, "eagle_aux_hidden_state_layer_ids", None),
    }}))
"""


def probe_engine_config(target: str, draft: str, env: dict | None = None) -> dict:
    """create_engine_config() for target + eagle3 draft in a fresh process."""
    return run_python(ENGINE_CONFIG_PROBE.format(target=target, draft=draft), env=env)


ENGINE_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_run.py")


def run_engine(spec: dict, env: dict | None = None, timeout: int = 900) -> dict:
    """One real vLLM engine in a process of its own (tests/engine_run.py, through the
    tools' engine_process: forked from the preloaded vLLM where the environment allows; a
    timeout stops its whole process group); its result.

    An engine that fails returns {"error": ...}; the log's tail is kept under "_stderr"
    for messages that a test asserts on or prints when it fails, the whole log under
    "_log" (vLLM logs to stdout)."""
    import tempfile

    from vllm_kimi_eagle.tools.engines import engine_process, start_log

    preloaded_process()
    full_env = {**os.environ, **BASE_ENV, **(env or {}), start_log.SHARED: "1"}
    # The engine sizes its KV cache itself (engine_run.py): vLLM's legacy variable would
    # override it.
    full_env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    with tempfile.TemporaryDirectory(prefix="vllm-kimi-eagle-engine-") as folder:
        log_path = os.path.join(folder, "engine.log")
        command = [sys.executable, ENGINE_RUN, json.dumps(spec)]
        result = engine_process.run(command, log_path, full_env, timeout)
        with open(log_path, errors="replace") as f:
            text = f.read()
    result["_stderr"] = text[-6000:]
    result["_log"] = text
    return result


# Set to 1 to start every engine in a fresh interpreter (tests/preloaded_vllm.py).
FRESH_ENGINES_ENV = "VLLM_KIMI_EAGLE_TEST_FRESH_ENGINES"
_PRELOADED: list = []


def preloaded_process():
    """This worker's preloaded vLLM process (tests/preloaded_vllm.py), started on first
    use, or None with FRESH_ENGINES_ENV=1. Its socket is named in the worker's environment
    (VLLM_KIMI_EAGLE_PRELOADED), so that every child, and every engine and server a tool
    starts, is forked from it (vllm_kimi_eagle/tools/engines/preloaded.py)."""
    from vllm_kimi_eagle.tools.engines import preloaded

    if os.environ.get(FRESH_ENGINES_ENV) == "1":
        return None
    if _PRELOADED and not _PRELOADED[0].alive():
        _PRELOADED.clear()
        os.environ.pop(preloaded.ENV, None)
    if not _PRELOADED:
        import atexit
        import tempfile

        handle, log_path = tempfile.mkstemp(prefix="vllm-kimi-eagle-preloaded-", suffix=".log")
        os.close(handle)
        _PRELOADED.append(preloaded_vllm.Preloaded({**os.environ, **BASE_ENV}, log_path))
        atexit.register(_PRELOADED[0].close)
        os.environ[preloaded.ENV] = _PRELOADED[0].socket_path
    return _PRELOADED[0]


def _preloaded_for(env: dict):
    """This worker's preloaded vLLM process, if a run with ``env`` may be forked from it;
    else None."""
    zygote = preloaded_process()
    if zygote is None:
        return None
    return zygote if preloaded_vllm.served_by_fork(env, zygote.env, zygote.after_import) else None


# ---- engines on the tiny models, shared by every test module of the session ----------
# The suite's engines are named in tests/engines.py; a test asks engine() for a job's result.
PROMPTS, MAX_TOKENS, NO_PLUGIN = engines.PROMPTS, engines.MAX_TOKENS, engines.NO_PLUGIN
STANDARD_JOB = engines.STANDARD_JOB
# vLLM alone in float32 asks for CPU_MLA for the target and an MLA draft, as a user must on
# a CPU with AMX, where vLLM would otherwise pick AMX_MLA, which cannot load float32
# weights (the plugin does this itself, vllm_kimi_eagle/cpu/cpu_mla_backend.py). Elsewhere
# CPU_MLA is what vLLM picks anyway, so the comparison with vLLM alone is the same on
# every machine.
CPU_MLA = "CPU_MLA"
_ENGINES: dict = {}


def upstream_float32_backends(draft_dir: str | None) -> dict:
    mla_draft = False
    if draft_dir:
        with open(os.path.join(draft_dir, "config.json")) as f:
            mla_draft = json.load(f).get("kv_lora_rank") is not None
    return {"attention_backend": CPU_MLA, **({"draft_attention_backend": CPU_MLA}
                                             if mla_draft else {})}


def engine_key(tiny: str, eng: engines.Engine, draft: str | None = None,
               env: dict | None = None) -> tuple:
    """What is started for ``eng`` (with a GIVEN draft and environment): (target, draft,
    environment, start), each as text or a path, float32 unless the start says otherwise."""
    draft_path = draft if eng.draft == engines.GIVEN else (
        eng.draft and os.path.join(tiny, eng.draft))
    full_env = {**eng.env, **(env or {})}
    start = {"dtype": "float32", **eng.start_for(tiny)}
    if full_env == NO_PLUGIN and start["dtype"] == "float32":
        start = {**upstream_float32_backends(draft_path), **start}
    return (os.path.join(tiny, eng.target), draft_path, json.dumps(full_env, sort_keys=True),
            json.dumps(start, sort_keys=True))


def _asked(eng, job, draft, env) -> None:
    """Raise where a test asks what the registry does not hold (tests/engines.py)."""
    if engines.ENGINES.get(getattr(eng, "name", None)) is not eng:
        raise LookupError(f"{eng!r} is no engine of the suite's registry (tests/engines.py): "
                          "ask for one with engines.named(NAME) at the module's top level")
    where = f"engine {eng.name!r} (tests/engines.py)"
    if (draft is None) == (eng.draft == engines.GIVEN):
        whose = "the test gives it" if eng.draft == engines.GIVEN else "the registry names it"
        raise TypeError(f"{where}: its draft is one {whose}; draft={draft!r} was passed")
    if env and not eng.env_given:
        raise TypeError(f"{where} takes no environment from the test; add an engine to the "
                        "registry for this one")
    if isinstance(job, dict) and not eng.job_given:
        raise TypeError(f"{where} runs only its named jobs "
                        f"({', '.join(engines.jobs_of(eng))}); name the job in the registry")
    if isinstance(job, str) and job not in engines.jobs_of(eng):
        raise LookupError(f"{where} has no job {job!r}: its jobs are "
                          f"{', '.join(engines.jobs_of(eng))}; add it there, so that the "
                          "engine runs it in its one start")


def engine(tiny: str, eng: engines.Engine, job: str | dict = engines.STANDARD,
           draft: str | None = None, env: dict | None = None) -> dict:
    """One of the suite's engines on the tiny models (tests/engines.py) and one job's result
    on it: the standard job (8 prompts x 64 greedy tokens) unless ``job`` names another
    the registry lists for it, or, for an engine whose draft a test writes, gives one.
    Each engine starts once for the whole run: it runs its standard job and every job the
    registry lists for it, in that order, and the results are kept for every test.

    The plugin's class served plainly keeps its standard job's first prefill too (a
    clone, which changes no token or counter): captured_engine() needs no start of its own.

    float32, not vLLM's bfloat16 default for these float32 checkpoints: a greedy
    comparison between runs whose batches differ (speculation verifies several tokens
    per step) is exact only where bfloat16 rounding cannot flip a near-tie; with the
    realistic draft (many rejections, many batch shapes) float32 keeps "lossless" a
    statement about speculation, not about rounding."""
    _asked(eng, job, draft, env)
    key = engine_key(tiny, eng, draft, env)
    full_env = json.loads(key[2])
    named = engines.jobs_of(eng)
    if eng.keeps_first_prefill:
        standard = named[engines.STANDARD]
        named[engines.STANDARD] = {**standard, **_capture_of(key, standard)}
    jobs = list(named.values())
    if isinstance(job, dict):
        asked = {**STANDARD_JOB, **job}
        jobs.append(asked)
        share = [key, asked]
    else:
        asked, share = named[job], key
    text = json.dumps(share)
    if text not in _ENGINES:
        in_order = _in_test_order(jobs)
        _ENGINES[text] = shared_run(share, lambda: _run_jobs(key, in_order, full_env))
    run = _ENGINES[text]
    if "error" in run:
        return run
    facts = {k: v for k, v in run.items() if k not in ("jobs", "asked")}
    return {**facts, **run["jobs"][run["asked"].index(asked)]}


# The order `pytest --test-order` asks (tests/conftest.py sets it for every worker):
# "reverse:SEED" or "shuffle:SEED", for the tests and each shared engine's jobs.
ORDER_ENV = "VLLM_KIMI_EAGLE_TEST_ORDER"


def reordered(things: list, order: str) -> list:
    """``things`` in the order ORDER_ENV names ("" keeps them)."""
    import random

    how, _, seed = order.partition(":")
    if how == "reverse":
        return things[::-1]
    if how == "shuffle":
        shuffled = list(things)
        random.Random(int(seed or 0)).shuffle(shuffled)
        return shuffled
    return list(things)


def _in_test_order(jobs: list[dict]) -> list[dict]:
    return reordered(jobs, os.environ.get(ORDER_ENV, ""))


def _run_jobs(key, jobs: list[dict], env: dict | None) -> dict:
    target, draft, _, start = key
    spec = {"target": target, "draft": draft, **json.loads(start), "jobs": jobs}
    result = run_engine(spec, env=env)
    if "error" not in result:
        result["asked"] = jobs
    return result


# A folder the pytest controller names for the run (tests/conftest.py): every worker keeps
# its engine results there, so that no configuration is started twice in one run.
SHARED_RUNS_ENV = "VLLM_KIMI_EAGLE_TEST_RUNS"


def shared_run(key, run):
    """``run()``'s result, computed once per test run across pytest-xdist's workers: the
    first worker to ask runs it under a lock, the others wait and read its result."""
    import fcntl
    import hashlib

    folder = os.environ.get(SHARED_RUNS_ENV)
    if not folder:
        return run()
    path = os.path.join(folder, hashlib.sha256(json.dumps(key).encode()).hexdigest()[:20])
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path + ".json"):
            with open(path + ".json") as f:
                return json.load(f)
        result = run()
        with open(path + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(path + ".tmp", path + ".json")
        return result


_CAPTURE_DIR: list[str] = []


def _capture_of(key, job: dict) -> dict:
    """The job keys that keep the draft's first prefill, in a file named for the engine
    and the job."""
    import hashlib

    if not _CAPTURE_DIR:
        import tempfile

        _CAPTURE_DIR.append(os.environ.get(SHARED_RUNS_ENV)
                            or tempfile.mkdtemp(prefix="vllm-kimi-eagle-capture-"))
    name = hashlib.sha256(json.dumps([key, job], sort_keys=True).encode()).hexdigest()[:16]
    draft = os.path.basename(key[1] or "none")
    return {"capture_draft_io": True,
            "capture_path": os.path.join(_CAPTURE_DIR[0], f"{draft}-{name}.pt")}


def captured_engine(tiny: str, eng: engines.Engine) -> dict:
    """engine()'s standard job with the draft's first prefill inputs and outputs saved (the
    file is ``result["captured"]``): the plugin's class served plainly, or an engine the
    registry marks ``captured``."""
    if not eng.keeps_first_prefill:
        raise LookupError(f"engine {eng.name!r} (tests/engines.py) keeps no prefill: mark it "
                          "captured there")
    return engine(tiny, eng)


# vLLM's run of our class vs the reference, float32 end to end: vLLM's CPU MLA kernel and
# fused norms reorder sums.
TOLERANCE = dict(rtol=1e-4, atol=1e-3)


def max_diff(pair) -> float:
    return float((pair[0] - pair[1]).abs().max())


def reference_draft(draft_dir: str, rope_theta: float | None = None, **spec_changes):
    """The checkpoint's draft in the pure-PyTorch reference (its config's reading, changed
    by ``spec_changes``, e.g. ``nope=False``), and its spec."""
    import dataclasses

    from safetensors.torch import load_file
    from transformers import AutoConfig

    from vllm_kimi_eagle.draft.draft_config import parse_draft_config
    from vllm_kimi_eagle.draft.draft_spec import canonical_name, spec_from_config
    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft
    from vllm_kimi_eagle.serving.config_alias import register_config_alias

    register_config_alias()
    with open(os.path.join(draft_dir, "config.json")) as f:
        spec = dataclasses.replace(spec_from_config(parse_draft_config(json.load(f))),
                                   **spec_changes)
    rope = dict(AutoConfig.from_pretrained(draft_dir).rope_parameters)
    if rope_theta is not None:
        rope["rope_theta"] = rope_theta
    reference = ReferenceDraft(spec, rope)
    weights = load_file(os.path.join(draft_dir, "model.safetensors"))
    reference.load_state_dict({canonical_name(k): v for k, v in weights.items()}, strict=True)
    return reference.eval(), spec


@functools.lru_cache(maxsize=1)
def tiny_target(tiny: str):
    """The tiny target in transformers (float32): the oracle of offline acceptance."""
    from transformers import DeepseekV3ForCausalLM

    from vllm_kimi_eagle.fixtures.target import target_model

    return DeepseekV3ForCausalLM.from_pretrained(os.path.join(tiny, "target"),
                                                 config=target_model().config).eval()


def served_sequences(result: dict) -> list:
    """(prompt length, prompt + served tokens) of an engine run, as offline.py takes them."""
    import torch

    return [(len(p), torch.tensor(p + t))
            for p, t in zip(result["prompt_token_ids"], result["token_ids"])]


def reference_numerics(draft_dir: str, captured_path: str, rope_theta: float | None = None):
    """The first prefill the engine captured, run again by the pure-PyTorch reference
    with the checkpoint's weights (and ``rope_theta`` instead of the config's rope base):
    {"combine" | "out" | "aux" | "logits": (reference, vLLM)} and the prefill length."""
    import torch

    reference, spec = reference_draft(draft_dir, rope_theta)
    io = torch.load(captured_path)
    forward = io["forward"]
    # The first request's prefill: positions 0..n-1 up to where the next request starts.
    restarts = (forward["positions"][1:] == 0).nonzero().flatten()
    first = int(restarts[0]) + 1 if len(restarts) else len(forward["positions"])
    assert io["combine_in"].shape[-1] == spec.num_aux * spec.target_hidden_size
    assert forward["hidden_states"].shape[-1] == spec.hidden_size
    with torch.no_grad():
        combined = reference.combine(io["combine_in"].float())
        out, aux = reference.unroll(
            forward["input_ids"][None, :first],
            forward["hidden_states"][None, :first].float(),
            forward["positions"][None, :first],
            steps=1,
        )[0]
        pairs = {
            "combine": (combined, io["combine_out"].float()),
            "out": (out[0], forward["out"][:first].float()),
            "aux": (aux[0], forward["aux"][:first].float()),
            "logits": (reference.draft_logits(out[0]),
                       reference.draft_logits(forward["out"][:first].float())),
        }
    return pairs, first, spec


def served(result: dict) -> dict:
    """The result of an engine that must have served; its log tail otherwise."""
    assert "error" not in result, f"{result['error']}\n{result['_stderr']}"
    return result


def skip_without_a_device() -> None:
    """Skip, naming why, where vLLM found no device to build its layers on (the CUDA build
    on a machine without a GPU: ``UnspecifiedPlatform``)."""
    from vllm.platforms import current_platform

    if current_platform.is_unspecified():
        pytest.skip("vLLM found no device here (the CUDA build without a GPU): its layers "
                    "cannot be built")


@functools.lru_cache(maxsize=1)
def cpu_mla_engine_problem() -> str | None:
    """Why this vLLM CPU build cannot run an MLA engine here, or None when it can (and why
    the engine tests do not run at all where vLLM is not on its CPU platform).

    The CPU builds before 0.32.0 have a CPU MLA attention backend, but their MLA layer
    also picks a *prefill* backend and, on CPU, falls back to FlashAttention, whose
    import fails (vllm/v1/attention/backends/fa_utils.py defines no FlashAttention
    symbols on CPU). 0.32.0 added CpuPlatform.get_mla_prefill_backend_cls.
    """
    from vllm.platforms import current_platform
    from vllm.platforms.cpu import CpuPlatform

    from vllm_kimi_eagle.compat import vllm_compat

    if not current_platform.is_cpu():
        return (
            f"vLLM {vllm_compat.installed_vllm_version()} runs on "
            f"{type(current_platform).__name__} here, not on the CPU build: the engine "
            "tests serve on vllm-cpu (make test); on a GPU, run make gpu-check."
        )
    if "get_mla_prefill_backend_cls" in vars(CpuPlatform):
        return None
    return (
        f"vllm-cpu {vllm_compat.installed_vllm_version()} cannot start an MLA engine on a "
        "CPU: its MLA layer selects the FlashAttention prefill backend, which does not "
        "import without a GPU (fixed in vllm-cpu 0.32.0 by a CPU MLA prefill backend). "
        "Engine tests run on 0.32.0; config-level tests run here."
    )


def engine_test_action(problem: str | None, version, proven_releases) -> str:
    """run, skip or fail an engine test (marker ``engine``; tests/conftest.py applies it):
    skip on a release that cannot start an MLA engine, but fail where the release is one
    the engine tests prove (vllm_compat.E2E_TESTED: a skip there would turn CI green with
    nothing proven)."""
    if problem is None:
        return "run"
    return "fail" if version in proven_releases else "skip"


# ---- edited copies of a tiny draft (bad checkpoints) -------------------------------------
def copy_draft(tiny: str, source: str, dest) -> tuple[str, dict]:
    """A copy of the tiny draft ``source`` at ``dest``, and its tensors to edit."""
    from safetensors.torch import load_file

    shutil.copytree(os.path.join(tiny, source), dest)
    return str(dest), load_file(os.path.join(dest, "model.safetensors"))


def save_tensors(dest: str, tensors: dict) -> str:
    """Write ``tensors`` as the draft's model.safetensors; its path."""
    from safetensors.torch import save_file

    path = os.path.join(dest, "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    return path


def docs_bash_block(*needles: str) -> str:
    """The one bash block of the docs that holds every needle."""
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", docs_text(), re.S)
              if all(n in b for n in needles)]
    assert len(blocks) == 1, f"{len(blocks)} bash blocks of the docs hold {needles}"
    return blocks[0]


def run_as_written(block: str, folder, replacements: dict | None = None,
                   timeout: float = 1500) -> subprocess.CompletedProcess:
    """A docs bash block as a user runs it from the checkout, in ``folder`` laid out as
    one (its eval/ is the checkout's): the checkout's commands and python3 as this
    interpreter, ``replacements`` applied after, on a machine whose environment sets no
    VLLM_CPU_KVCACHE_SPACE (what needs it sets it). Its exit must be 0."""
    commands = {".venv/bin/vllm-kimi-eagle": f"{sys.executable} -m {CLI_MODULE}",
                "lm_eval run ": f"{sys.executable} -m lm_eval run ",
                "python3 ": f"{sys.executable} ", **(replacements or {})}
    for old, new in commands.items():
        block = block.replace(old, new)
    if not os.path.lexists(os.path.join(folder, "eval")):
        os.symlink(os.path.join(REPO, "eval"), os.path.join(folder, "eval"))
    env = {k: v for k, v in {**os.environ, **BASE_ENV}.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def lm_eval_output(folder) -> dict:
    """What lm-eval wrote under an --output_path with --log_samples, one task: its numeric
    metrics and the generated answer of every document."""
    import glob

    (results,) = glob.glob(os.path.join(str(folder), "*", "results_*.json"))
    (samples,) = glob.glob(os.path.join(str(folder), "*", "samples_*.jsonl"))
    with open(results) as f:
        (metrics,) = json.load(f)["results"].values()
    answers = {}
    with open(samples) as f:
        for line in f:
            sample = json.loads(line)
            answers.setdefault(sample["doc_id"], sample["resps"][0][0])
    return {"metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
            "answers": answers}


# A greedy token whose top two logits are closer than this may flip between float32 kernels
# (vLLM's against transformers'): the reference does not decide an answer that passes one.
NEAR_TIE = 1e-2


def reference_answers(tiny: str, folder) -> dict:
    """doc_id -> (answer, decided): the tiny target in transformers, neither vLLM nor the
    plugin, answering each sample lm-eval logged under ``folder`` greedily, as lm-eval's
    vllm model asks: the context tokenized with the tokenizer's special tokens unless it
    starts with BOS, at most max_gen_toks tokens, stopped at EOS, detokenized after the
    prompt and cut at the first stop string. ``decided`` is False where two top logits
    came within NEAR_TIE."""
    import glob

    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(tiny, "target"))
    target = tiny_target(tiny)
    (samples,) = glob.glob(os.path.join(str(folder), "*", "samples_*.jsonl"))
    answers = {}
    with open(samples) as f, torch.no_grad():
        for line in f:
            sample = json.loads(line)
            if sample["doc_id"] in answers:
                continue
            args = sample["arguments"]["gen_args_0"]
            context, kwargs = args["arg_0"], args["arg_1"]
            bos = tokenizer.bos_token
            ids = tokenizer(context, add_special_tokens=not (bos and context.startswith(bos)))
            seq, new, least_gap = torch.tensor(ids["input_ids"]), [], float("inf")
            for _ in range(int(kwargs.get("max_gen_toks", 256))):
                top = target(input_ids=seq[None]).logits[0, -1].topk(2)
                least_gap = min(least_gap, (top.values[0] - top.values[1]).item())
                if top.indices[0].item() == tokenizer.eos_token_id:
                    break
                new.append(top.indices[0].item())
                seq = torch.cat([seq, top.indices[:1]])
            # As vLLM detokenizes: the new tokens' text after the prompt's, so that the
            # first word keeps its space.
            options = {"skip_special_tokens": False, "spaces_between_special_tokens": False}
            prompt = tokenizer.decode(ids["input_ids"], **options)
            text = tokenizer.decode(ids["input_ids"] + new, **options)[len(prompt):]
            stops = [s for s in list(kwargs.get("until") or []) + [tokenizer.eos_token] if s]
            cut = min([text.find(s) for s in stops if s in text] or [len(text)])
            answers[sample["doc_id"]] = (text[:cut], least_gap >= NEAR_TIE)
    return answers


# The CPU sampler's expand (tests/unit/test_cpu_sampler.py and, installed,
# tests/integration/test_cpu_mends_installed.py): cu_num_tokens of three requests, the
# second with no draft tokens.
EXPAND_CU = [3, 3, 5]


def reference_expand(values: list, cu: list, replace_from, replace_to) -> list:
    """The Triton expand_kernel, one request at a time."""
    out, start = [], 0
    for value, end in zip(values, cu):
        out += [replace_to if value == replace_from else value] * (end - start)
        start = end
    return out
