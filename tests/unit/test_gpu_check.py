"""gpu-check's pure parts: the matrix, what it reads from logs, its verdicts; and its
refusal on a machine without a CUDA GPU (this one)."""

from __future__ import annotations


import pytest

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.tools.engines import vllm_runners
from vllm_kimi_eagle.tools.engines.engine_case import log_facts, tripped_on_neighbours
from vllm_kimi_eagle.tools.gpu_check import cli
from vllm_kimi_eagle.tools.gpu_check.matrix import (
    IN_TREE,
    PLUGIN,
    SHORTCUT_ON,
    SHORTCUT_PROBABILISTIC,
    SHORTCUT_USER,
    matrix,
)
from vllm_kimi_eagle.tools.gpu_check.verdicts import case_checks, format_table, report_rows

ON_LINE = ("vllm-kimi-eagle: greedy draft-token shortcut (vLLM's use_local_argmax_reduction) "
           "is on, turned on by the plugin: greedy draft sampling")
PLUGIN_LINE = ("vllm-kimi-eagle: serving the draft /m/draft with the plugin's class (fc_norm "
               "False, norm_output False, norm_before_residual False, draft vocabulary 512)")
GRAPHS = "Graph capturing finished in 3 secs, took 0.10 GiB"
COMPILED = "Compiling a graph for compile range (1, 8192) takes 9.12 s"


def test_matrix_covers_runners_drafts_classes_and_settings():
    cases = {c.name: c for c in matrix(gpus=1)}
    # The runner vLLM picks, then V1 and V2 forced.
    assert {c.runner for c in cases.values()} == {"default", "v1", "v2"}
    for runner in ("v1", "v2"):
        for draft in ("draft", "draft-eagle3.1"):
            ours, theirs = cases[f"{runner}/{draft}/plugin"], cases[f"{runner}/{draft}/in-tree"]
            assert (ours.draft_class, theirs.draft_class) == (PLUGIN, IN_TREE)
            assert ours.in_tree_twin == theirs.name and ours.no_draft == f"{runner}/none"
        assert cases[f"{runner}/draft/plugin-probabilistic"].shortcut == SHORTCUT_PROBABILISTIC
        assert cases[f"{runner}/draft/plugin-user-false"].shortcut == SHORTCUT_USER
    assert not any(c.tensor_parallel > 1 for c in cases.values())
    fp8 = cases["default/draft-fp8-block64/plugin"]
    assert fp8.in_tree_twin == "default/draft-fp8-block64/in-tree" and fp8.draft == "draft-fp8-block64"
    two = [c for c in matrix(gpus=2) if c.tensor_parallel == 2]
    assert {c.draft_class for c in two} == {None, PLUGIN, IN_TREE}


def test_cases_set_the_runner_class_and_speculative_config():
    cases = {c.name: c for c in matrix(gpus=1)}
    forced = cases["v2/draft/plugin-user-false"]
    assert forced.env() == {vllm_runners.RUNNER_SWITCH: "1", "VLLM_KIMI_EAGLE_DRAFT": "plugin"}
    assert cases["default/draft/in-tree"].env() == {"VLLM_KIMI_EAGLE_DRAFT": "upstream"}
    assert forced.speculative_config("/m", 3) == {
        "method": "eagle3", "model": "/m/draft", "num_speculative_tokens": 3,
        "use_local_argmax_reduction": False}
    assert cases["v1/none"].speculative_config("/m", 3) is None


def test_runner_facts_per_release():
    assert vllm_runners.default_gpu_runner(vllm_compat.parse_version("0.26.0")) == "v1"
    assert vllm_runners.default_gpu_runner(vllm_compat.parse_version("0.32.0")) == "v2"


def test_log_facts():
    facts = log_facts(f"INFO Using V2 Model Runner\n{PLUGIN_LINE}\n{ON_LINE}\n{GRAPHS}\n")
    assert facts["runner"] == "v2" and facts["cuda_graphs"] == GRAPHS
    assert SHORTCUT_ON in facts["shortcut"] and facts["plugin_class"]
    assert log_facts("nothing")["runner"] == "v1"
    assert log_facts("nothing", started=False)["runner"] is None


def _result(tokens, drafts=10, accepted=15):
    return {"start_s": 30.0, "token_ids": tokens, "drafts": drafts, "accepted_tokens": accepted,
            "acceptance_length": 1 + accepted / drafts if drafts else None,
            "acceptance_by_position": [0.8, 0.5, 0.2]}


def test_verdicts_pass_and_fail_with_their_reasons():
    cases = {c.name: c for c in matrix(gpus=1)}
    ours, theirs = cases["v1/draft/plugin"], cases["v1/draft/in-tree"]
    results = {"v1/none": _result([[1, 2], [3, 4]], drafts=0, accepted=0),
               ours.name: _result([[1, 2], [3, 5]]), theirs.name: _result([[1, 2], [3, 5]])}
    good = log_facts(f"{COMPILED}\n{PLUGIN_LINE}\n{ON_LINE}\n{GRAPHS}")
    checks = case_checks(ours, results[ours.name], good, results)
    assert all(c.ok for c in checks), checks
    assert {c.check for c in checks} >= {"starts", "compiled, CUDA graphs", "runner",
                                         "drafts proposed", "draft class", "shortcut decision",
                                         "same as vLLM's in-tree class"}
    # Graphs captured but nothing compiled (enforce-eager would capture none either).
    uncompiled = {c.check: c for c in case_checks(ours, results[ours.name],
                                                  log_facts(f"{PLUGIN_LINE}\n{ON_LINE}\n{GRAPHS}"),
                                                  results)}
    assert not uncompiled["compiled, CUDA graphs"].ok
    # The runner vLLM picks: checked against the release's default when none is forced.
    default = cases["default/draft/plugin"]
    results[default.name] = results[ours.name]
    picked = {c.check: c for c in case_checks(default, results[ours.name], good, results,
                                              default_runner="v2")}
    assert not picked["runner"].ok and "ran v1, expected v2" in picked["runner"].detail
    # The in-tree twin drafted differently: the plugin's case fails, saying so.
    results[theirs.name] = _result([[1, 2], [3, 5]], accepted=14)
    bad = {c.check: c for c in case_checks(ours, results[ours.name], good, results)}
    assert not bad["same as vLLM's in-tree class"].ok
    # No shortcut line, no graphs, the in-tree class loaded: each its own failure.
    worse = {c.check: c for c in case_checks(ours, results[ours.name], log_facts(""), results)}
    assert not worse["shortcut decision"].ok and not worse["compiled, CUDA graphs"].ok
    assert not worse["draft class"].ok
    crashed = case_checks(ours, {"error": "ValueError: No valid MLA prefill backend"}, good, {})
    assert [(c.check, c.ok) for c in crashed] == [("starts", False)]
    rows = report_rows([cases["v1/none"], ours], results, {ours.name: good}, bad.values())
    assert rows[1]["same_tokens_as_no_draft"] == "1/2" and rows[1]["ok"] is False
    assert "FAIL same as vLLM's in-tree class" in format_table(rows)


def test_gpu_check_says_which_runner_serves_a_k_schedule():
    from packaging.version import Version

    from vllm_kimi_eagle.tools.gpu_check.cli import schedule_support

    assert schedule_support(Version("0.32.0")) == {"v1": "served as written",
                                                   "v2": "served as written"}
    older = schedule_support(Version("0.30.0"))
    assert older["v1"] == "served as written" and "#51510" in older["v2"]


@pytest.mark.parametrize("cause, again", [
    ("(EngineCore pid=1445) ValueError: No available memory for the cache blocks. Try "
     "increasing `gpu_memory_utilization` when initializing the engine", True),
    ("(EngineCore pid=9) AssertionError: Error in memory profiling. Initial free memory "
     "..., current free memory ...", True),
    ("(EngineCore pid=9) ValueError: No valid MLA prefill backend found", False),
])
def test_a_case_that_tripped_on_its_neighbours_runs_again_alone(cause, again):
    # The first cause is the line an engine printed on an H200 (vLLM 0.26.0) with three
    # engines starting beside it.
    assert tripped_on_neighbours({"error": "engine failed", "cause": cause}) is again
    assert tripped_on_neighbours({"token_ids": []}) is False
