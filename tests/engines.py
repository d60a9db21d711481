"""The suite's engines, each by name: what it is started with and the jobs it runs.

A test asks for an engine by its name at module level (``ENGINE = engines.named("draft")``,
so that a name the registry does not hold fails the module's collection) and for a result
with ``helpers.engine(tiny, ENGINE, job)``. Each engine starts once in a run, whichever
test asks first, and runs the standard job (8 prompts x 64 greedy tokens) and every job
listed here for it, in that one start; a job not listed is an error where it is asked.

A name is the draft's folder (``none``: no draft), after ``TARGET:`` where the target is
another than the tiny one, and ``@`` and what else it is started with. Engines whose draft
a test writes (``draft=GIVEN``: a calibrate ``--write`` copy, a quantized or broken copy, a
hub id) are each one test's own: the test gives the draft, and, where the entry says so,
the job and environment.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping

from vllm_kimi_eagle.cpu.cpu_mla_verify import SWITCH as CPU_MLA_VERIFY
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_ENV
from vllm_kimi_eagle.draft.rope_override import ROPE_THETA_ENV
from vllm_kimi_eagle.fixtures import corpus, kimi_cost, variants
from vllm_kimi_eagle.fixtures.mtp import MTP_FOLDER
from vllm_kimi_eagle.fixtures.offline import SUITE_PROMPTS, SUITE_SEED

# The standard job; the builder checks its margins on these prompts too (fixtures/margins.py).
PROMPTS = corpus.demo_prompts(SUITE_PROMPTS, seed=SUITE_SEED)
MAX_TOKENS = 64
STANDARD_JOB = {"prompts": PROMPTS, "max_tokens": MAX_TOKENS}
STANDARD = "standard"

# Environments an engine is started with.
NO_PLUGIN = {"VLLM_PLUGINS": ""}
UPSTREAM = {"VLLM_KIMI_EAGLE_DRAFT": "upstream"}
NOPE_OFF = {"VLLM_KIMI_EAGLE_DRAFT_NOPE": "off"}
ROPE_10000 = {ROPE_THETA_ENV: "10000"}
MULTIPROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
TP_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
DIVERGE = "VLLM_KIMI_EAGLE_PLANTED_DIVERGENCE"  # tests/divergences.py
DIVERGENCES = ("capture-ids-shifted", "shortcut-reset", "class-swapped",
               "rope-override-dropped")

# Jobs beyond the standard one (tests/engine_run.py reads them).
BOTH_PATHS = {"both_draft_paths": True}
# Sampled requests beside the greedy chats (test_mixed_batch_e2e). top_k in one request
# and top_p in none: the batch's first step (every request prefilling, no draft token)
# takes the CPU top-k path on an empty batch, which killed the engine before the plugin's
# mend (cpu_sampler.py, defect 2). Each runs to its length (a sampled token may be
# <|eos|>), beside the greedy rows to the end.
TO_LENGTH = {"max_tokens": 64, "ignore_eos": True}
SAMPLED = [
    {"temperature": 0.8, "seed": 1, **TO_LENGTH},
    {"temperature": 0.8, "top_k": 20, "n": 2, "logprobs": 2, "seed": 2, **TO_LENGTH},
    {"temperature": 1.0, **TO_LENGTH},
    {"temperature": 0.5, "seed": 3, **TO_LENGTH},
]
# For vLLM's stand-in: temperature only. Its uninitialised top-k can also index past the
# vocabulary and take the engine down ("index ... is out of bounds"), which would end the
# run before the greedy rows can be compared.
SAMPLED_NO_TOP_K_OR_P = [{"temperature": 0.8, "max_tokens": 64, "seed": 1},
                         {"temperature": 1.0, "max_tokens": 64, "n": 2, "logprobs": 2}]
MIXED = {"mixed": SAMPLED, "mixed_vllm_stand_in": SAMPLED_NO_TOP_K_OR_P}
# One image per prompt, 12 to 24 image tokens each (patch 14, 2x2 merge).
IMAGE_PROMPTS = [
    {"text": p, "image": {"width": 112 + 28 * (i % 3), "height": 84 + 28 * (i % 2), "seed": i}}
    for i, p in enumerate(PROMPTS)
]

# The test gives it (see the module docstring).
GIVEN = "given"


@dataclasses.dataclass(frozen=True, eq=False)
class Engine:
    name: str
    draft: str | None  # a folder of the tiny models, None (no draft) or GIVEN
    target: str = "target"  # a folder of the tiny models
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # What vLLM is started with beyond float32 (tests/engine_run.py's keys); a function of
    # the tiny models' folder where it names a path there.
    start: Mapping | Callable[[str], Mapping] = dataclasses.field(default_factory=dict)
    # Named jobs beyond the standard one; a STANDARD key replaces the standard job.
    jobs: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)
    # The standard job keeps the draft's first prefill (helpers.captured_engine); the
    # plugin's class served plainly always does.
    captured: bool = False
    # A GIVEN draft's test also gives the job, or variables of its environment.
    job_given: bool = False
    env_given: bool = False

    def start_for(self, tiny: str) -> dict:
        return dict(self.start(tiny) if callable(self.start) else self.start)

    @property
    def keeps_first_prefill(self) -> bool:
        """Its standard job keeps the draft's first prefill: marked ``captured``, or a draft
        served plainly (no environment, float32 and nothing else started)."""
        plain = bool(self.draft) and not self.env and not self.start and not self.env_given
        return self.captured or plain


def _draft_model(tiny: str, **extra) -> dict:
    """Draft-model speculation: the tiny target drafting for itself (a whole MLA model)."""
    return {"speculative_config": {"method": "draft_model", "num_speculative_tokens": 3,
                                   "model": os.path.join(tiny, "target"), **extra}}


def _mtp(**extra) -> dict:
    """DeepSeek MTP: target-mtp's own MTP layer, run k times per step as vLLM does."""
    return {"speculative_config": {"method": "mtp", "num_speculative_tokens": 3, **extra}}


NGRAM = {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                                "prompt_lookup_max": 3, "prompt_lookup_min": 1}}
BF16 = {"dtype": "bfloat16"}
COMPILED = {"enforce_eager": False}
TP2 = {"tensor_parallel_size": 2}
# The drafts served side by side with vLLM's in-tree class: the layout variants written in
# vLLM's convention, the separately trained drafts and the Kimi-K3 ones.
SIDE_BY_SIDE = tuple(v.name for v in variants.DRAFT_VARIANTS if v.layer_ids == "input-of")
# The training tools' exports vLLM alone is run on (test_trainer_exports_e2e).
EXPORTS_ALONE = ("draft-modelopt", "draft-torchspec", "draft-torchspec-vllm",
                 "draft-specforge", "draft-late-modelopt")
COMPILED_DRAFTS = ("draft", "draft-eagle3.1")
K25 = "target-k25"

_OWN_JOBS = {"draft": {"both_paths": BOTH_PATHS, "mixed": MIXED},
             "draft-pruned": {"both_paths": BOTH_PATHS}}

REGISTRY = (
    # No draft: the target alone, with and without the plugin.
    Engine("none", None),
    Engine("none@no-plugin", None, env=NO_PLUGIN),
    Engine("none@bf16", None, start=BF16),
    # Every tiny draft through the plugin's class, float32.
    *(Engine(v.name, v.name, jobs=_OWN_JOBS.get(v.name, {})) for v in variants.DRAFT_VARIANTS),
    # The same drafts through vLLM's in-tree class (the switch).
    *(Engine(f"{name}@upstream", name, env=UPSTREAM) for name in SIDE_BY_SIDE),
    # vLLM alone (VLLM_PLUGINS=""), where a test compares the plugin with it.
    Engine("draft@no-plugin", "draft", env=NO_PLUGIN),
    *(Engine(f"{name}@no-plugin", name, env=NO_PLUGIN) for name in EXPORTS_ALONE),
    # bfloat16 (vLLM's default for these float32 checkpoints), compiled, tensor parallel.
    Engine("draft@bf16", "draft", start=BF16),
    Engine(f"{variants.LLAMA_DRAFT}@bf16", variants.LLAMA_DRAFT, start=BF16),
    Engine(f"{variants.LLAMA_DRAFT}@bf16+no-plugin", variants.LLAMA_DRAFT, env=NO_PLUGIN,
           start=BF16),
    Engine("none@compiled", None, start=COMPILED),
    *(Engine(f"{name}@compiled", name, start=COMPILED) for name in COMPILED_DRAFTS),
    *(Engine(f"{name}@compiled+upstream", name, env=UPSTREAM, start=COMPILED)
      for name in COMPILED_DRAFTS),
    Engine("draft-pruned@tp2", "draft-pruned", env=TP_ENV, start=TP2,
           jobs={"both_paths_checksums": {**BOTH_PATHS, "replicated_checksums": True}}),
    # One switch or setting of the plugin each.
    Engine("draft@cpu-mla-verify-off", "draft", env={CPU_MLA_VERIFY: "0"}),
    Engine("draft-output-of@read-input-of", "draft-output-of", env={CONVENTION_ENV: "input-of"}),
    Engine("draft@rope-10000", "draft", env=ROPE_10000, captured=True),
    # vLLM made to diverge after the plugin decided (the self-check refuses each), and the
    # shifted ids served with the check only warning.
    *(Engine(f"draft@diverge:{d}", "draft", env={
        **({**UPSTREAM, **ROPE_10000} if d == "rope-override-dropped" else {}), DIVERGE: d})
      for d in DIVERGENCES),
    Engine("draft@diverge:capture-ids-shifted+warn", "draft",
           env={DIVERGE: "capture-ids-shifted", "VLLM_KIMI_EAGLE_SELF_CHECK": "warn"}),
    # Other speculative methods, with the plugin as a guest and without it.
    Engine("none@draft-model", None, start=_draft_model),
    Engine("none@draft-model+no-plugin", None, env=NO_PLUGIN,
           start=lambda tiny: _draft_model(tiny, attention_backend="CPU_MLA")),
    Engine(f"{MTP_FOLDER}:none@mtp", None, target=MTP_FOLDER, start=_mtp()),
    Engine(f"{MTP_FOLDER}:none@mtp+no-plugin", None, target=MTP_FOLDER, env=NO_PLUGIN,
           start=_mtp(attention_backend="CPU_MLA")),
    Engine("none@ngram", None, start=NGRAM),
    Engine("none@ngram+no-plugin", None, env=NO_PLUGIN, start=NGRAM),
    # Other targets: the Kimi-cost one (61 layers) and the K2.5 multimodal layout.
    Engine(f"{kimi_cost.NAME}:none", None, target=kimi_cost.NAME),
    Engine(f"{kimi_cost.NAME}:draft-kimi-cost-output-of", "draft-kimi-cost-output-of",
           target=kimi_cost.NAME),
    *(Engine(f"{K25}:{name}", draft, target=K25, env=MULTIPROCESS,
             start={"trust_remote_code": True, **start},
             jobs={STANDARD: {**STANDARD_JOB, "image_prompts": images}})
      for name, draft, start, images in (
          ("draft", "draft", {}, IMAGE_PROMPTS), ("none", None, {}, IMAGE_PROMPTS),
          ("draft@language-model-only", "draft", {"language_model_only": True},
           IMAGE_PROMPTS[:1]))),
    # Drafts a test writes, each that test's own.
    Engine("nope-added", GIVEN),
    Engine("nope-added@nope-off", GIVEN, env=NOPE_OFF),
    Engine("calibrated", GIVEN, job_given=True),
    Engine("quantized@bf16", GIVEN, start=BF16),
    Engine("quantized@bf16+upstream", GIVEN, env=UPSTREAM, start=BF16),
    Engine("broken-copy", GIVEN, jobs={STANDARD: {"prompts": PROMPTS[:1], "max_tokens": 4}}),
    Engine("hub-id", GIVEN, env_given=True),
)
ENGINES = {engine.name: engine for engine in REGISTRY}
assert len(ENGINES) == len(REGISTRY), "two engines of the registry share a name"


def named(name: str) -> Engine:
    """The registry's engine ``name``; ask at a test module's top level, so that a name not
    here fails the module's collection."""
    if name not in ENGINES:
        raise LookupError(f"no engine {name!r} in the suite's registry (tests/engines.py); "
                          "add it there with its configuration and jobs, or ask for one "
                          f"of: {', '.join(ENGINES)}")
    return ENGINES[name]


def jobs_of(engine: Engine) -> dict[str, dict]:
    """The engine's jobs by name, the standard one first."""
    return {STANDARD: dict(engine.jobs.get(STANDARD, STANDARD_JOB)),
            **{name: {**STANDARD_JOB, **job} for name, job in engine.jobs.items()
               if name != STANDARD}}
