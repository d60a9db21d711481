"""What ``vllm-kimi-eagle kimi-width`` asserts of its engines (tools/kimi_width/verdicts.py),
on results shaped as the engines return them: each check fails on the fault it names."""

from __future__ import annotations

import copy

import pytest

from vllm_kimi_eagle.fixtures import kimi_width as kw
from vllm_kimi_eagle.tools.kimi_width import measure, verdicts

PROMPTS = kw.prompts(kw.KIMI, 3, length=6)
DRAFT = "draft-modelopt-32k"


def _result(case: verdicts.Case) -> dict:
    result = {"start_s": 60.0, "generate_s": 10.0, "wall_s": 90.0,
              "token_ids": [kw.expected_tokens(p, 8, kw.KIMI) for p in PROMPTS],
              "memory": {"worker_anon_gib": 17.0}}
    if case.draft:
        module = "vllm_kimi_eagle.serving.draft_model" if case.draft_class == verdicts.PLUGIN \
            else "vllm.model_executor.models.deepseek_eagle3"
        result.update(drafts=6, draft_tokens=18, accepted_per_position=[6, 6, 6],
                      acceptance_length=4.0, draft_class=f"{module}.Eagle3DeepseekV2ForCausalLM",
                      draft_load_s=5.0, draft_load_anon_gib=1.7)
    return result


@pytest.fixture
def run():
    cases = verdicts.matrix((DRAFT,), (1, 2))
    return cases, {c.name: _result(c) for c in cases}


def _failed(cases, results, gpu=False):
    return sorted({(c.case, c.check) for c in verdicts.all_checks(cases, results, PROMPTS,
                                                                  kw.KIMI, gpu) if not c.ok})


def test_every_engine_of_a_right_run_passes(run):
    assert _failed(*run) == []
    cases, _ = run
    # Each class goes first at one tensor-parallel size: the page cache favours neither.
    assert [c.name for c in cases] == [
        "tp1/none", f"tp1/{DRAFT}/in-tree", f"tp1/{DRAFT}/plugin",
        "tp2/none", f"tp2/{DRAFT}/plugin", f"tp2/{DRAFT}/in-tree"]


@pytest.mark.parametrize("fault, check", [
    (lambda r: r["token_ids"][0].__setitem__(3, 7), "greedy tokens as built"),
    (lambda r: r.update(drafts=0), "drafts proposed"),
    (lambda r: r.update(acceptance_length=1.1), "acceptance as built"),
    (lambda r: r.update(draft_class="vllm.model_executor.models.deepseek_eagle3.X"),
     "draft class"),
    (lambda r: r.update(accepted_per_position=[6, 6, 5]), "counters as vLLM's class"),
    (lambda r: r["memory"].update(worker_anon_gib=17.5), "worker peak memory <= 1.02x"),
    (lambda r: r.update(draft_load_anon_gib=3.4), "memory the draft's loading added <= 1.02x"),
])
def test_each_fault_of_the_plugins_engine_fails_its_check(run, fault, check):
    cases, results = run
    name = f"tp1/{DRAFT}/plugin"
    results = copy.deepcopy(results)
    fault(results[name])
    failed = _failed(cases, results)
    assert (name, check) in failed and {n for n, _ in failed} == {name}, failed


def test_draft_loading_is_compared_over_the_run_not_per_cold_load(run):
    """One cold-disk load varies by a third either way; the run's sum must stay within
    1.1x of vLLM's class."""
    cases, results = run
    results = copy.deepcopy(results)
    results[f"tp1/{DRAFT}/plugin"].update(draft_load_s=6.5)  # 1.3x here, 0.7x there
    results[f"tp2/{DRAFT}/plugin"].update(draft_load_s=3.5)
    assert _failed(cases, results) == []
    results[f"tp2/{DRAFT}/plugin"].update(draft_load_s=5.6)
    assert _failed(cases, results) == [("all pairs", "draft loading over the run <= 1.1x")]


def test_an_engine_that_did_not_start_fails_and_names_why(run):
    cases, results = run
    results[f"tp2/{DRAFT}/in-tree"] = {"error": "RuntimeError: Engine core initialization "
                                                "failed", "cause": "out of memory"}
    failed = _failed(cases, results)
    assert (f"tp2/{DRAFT}/in-tree", "starts") in failed
    assert (f"tp2/{DRAFT}/plugin", "against vLLM's class") in failed


def test_on_a_gpu_an_engine_must_be_compiled_with_cuda_graphs(run):
    cases, results = run
    for result in results.values():
        result["log_facts"] = {"compiled": "torch.compile takes 20 s",
                               "cuda_graphs": "Graph capturing finished in 1 secs"}
    assert _failed(cases, results, gpu=True) == []
    results["tp1/none"]["log_facts"]["cuda_graphs"] = None
    assert _failed(cases, results, gpu=True) == [("tp1/none", "compiled, CUDA graphs")]


def test_the_probe_lines_give_each_models_loading(tmp_path):
    """The draft's loading is its own line (vLLM logs only the first model's), the target
    the other; under tensor parallelism the slowest rank's."""
    line = ('VLLM_KIMI_EAGLE_LOAD {"model": "%s", "class": "%s", "seconds": %s, '
            '"before_kib": {"RssAnon": %d}, "after_kib": {"RssAnon": %d}}\n')
    log = tmp_path / "engine.log"
    log.write_text("noise\n" + line % ("/m/target", "T", 30.0, 1000, 7000000)
                   + line % ("/m/draft", "vllm_kimi_eagle.X", 5.0, 7000000, 8800000)
                   + line % ("/m/draft", "vllm_kimi_eagle.X", 6.5, 7000000, 8700000))
    found = measure.loading(measure.load_lines(str(log)), "/m/draft")
    assert found["target_load_s"] == 30.0 and found["draft_load_s"] == 6.5
    assert found["draft_class"] == "vllm_kimi_eagle.X"
    assert found["draft_load_anon_gib"] == round(1800000 / 1024 ** 2, 3)
