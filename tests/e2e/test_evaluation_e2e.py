"""vllm-kimi-eagle eval on the tiny models: real servers, real lm-eval."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.helpers import docs_bash_block, lm_eval_output, run_as_written, run_cli
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.evaluation.tasks import TINY_TASK

pytestmark = pytest.mark.engine


def _report(out) -> dict:
    report = json.loads((out / "report.json").read_text())
    print("\n" + (out / "report.md").read_text())
    return report


def _readme_offline_eval() -> str:
    """The docs' offline eval command (the bash block that runs kimi_eagle_gpqa_tiny)."""
    return docs_bash_block("vllm-kimi-eagle eval", TINY_TASK)


def test_readme_offline_eval_runs_as_written(tiny, tmp_path):
    """The documented command, on a machine whose environment sets no VLLM_CPU_KVCACHE_SPACE."""
    run_as_written(_readme_offline_eval(), tmp_path)
    out = tmp_path / "out" / "eval"
    for name in ("report.json", "report.md", "report.png", "server-with_draft.log",
                 "server-without_draft.log"):
        assert (out / name).exists(), name
    report = _report(out)
    base, spec, cmp = report["without_draft"], report["with_draft"], report["comparison"]
    assert spec["spec"]["drafts"] > 0 and base["spec"]["drafts"] == 0
    assert base["metrics"] == spec["metrics"] and "exact_match,strict-match" in base["metrics"]
    assert cmp["samples"] == 8 and cmp["identical_answers"], cmp["disagreements"]
    assert base["requests"] == spec["requests"] == 8
    assert base["finished_requests"] == spec["finished_requests"] == 8  # window: no warm-up
    assert base["output_tokens"] == spec["output_tokens"] > 0
    assert isinstance(cmp["consistent"], bool)
    assert cmp["speedup_generation"] > 0 and cmp["speedup_time_per_output_token"] > 0
    for run in (base, spec):
        assert run["server_args"][:4] == ["--seed", "0", "--dtype=float32", "--enforce-eager"]
        assert run["server_env"] == {"VLLM_CPU_KVCACHE_SPACE": "1"}
        assert run["longest_prompt_tokens"] + 48 <= run["max_model_len"]
    assert "--speculative-config" in spec["server_args"]
    assert "--speculative-config" not in base["server_args"]
    # Every document's own acceptance, by the task's categories, adding up to the counters
    figures = spec["per_request"]
    assert base["per_request"] is None and figures["adds_up_to_counters"]
    # Every document has its figures; the distribution holds those that drafted (an
    # answer of one token or none has no draft step), and the report says which did not.
    assert len(figures["per_document"]) == 8
    drafted = [d for d in figures["per_document"] if d["acceptance_length"] is not None]
    assert figures["requests"] == len(drafted) > 0
    assert sum(d["requests"] for d in figures["by_category"].values()) == len(drafted)
    assert set(figures["by_category"]) <= {"days", "capitals", "colors", "numbers"}
    text = (out / "report.md").read_text()
    assert "Acceptance length per request" in text
    assert (f"{8 - len(drafted)} of 8 documents" in text) == (len(drafted) < 8)


def _scrape(server: vllm_server.Server) -> dict:
    """The test's own reading of the spec-decode counters (not the eval's)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict = {}
    for family in text_string_to_metric_families(server.get("/metrics")):
        for sample in family.samples:
            if sample.name.startswith(("vllm:spec_decode_num_", "vllm:generation_tokens_total")):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def test_eval_acceptance_matches_counters_scraped_independently(shared_servers, tmp_path):
    """Servers not started by the eval (the e2e files' shared pair, --base-url and
    --spec-url); the test reads the speculating server's counters around the whole eval.
    The eval's window is the task's requests after one warm-up request, so its counts are
    a little below the test's and its acceptance close."""
    server = shared_servers["draft"]
    before = _scrape(server)
    proc = run_cli("eval", "--base-url", shared_servers["none"].base_url, "--spec-url",
                   server.base_url, "--task", TINY_TASK, "--limit", "8", "--max-tokens",
                   "48", "--concurrency", "4", "--out", str(tmp_path / "eval"), timeout=1200)
    after = _scrape(server)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = _report(tmp_path / "eval")
    counted = report["with_draft"]["spec"]
    seen = {k.removeprefix("vllm:").removesuffix("_total"): after[k] - before.get(k, 0.0)
            for k in after}
    assert counted["drafts"] > 0
    assert report["with_draft"]["server_args"] is None  # a server of ours, not started there
    assert report["with_draft"]["per_request"] is None  # not started with the flag: said
    assert "reported no per-request acceptance" in (tmp_path / "eval" / "report.md").read_text()
    warmup_tokens = seen["generation_tokens"] - report["with_draft"]["output_tokens"]
    assert 0 < warmup_tokens <= 48  # exactly one warm-up request outside the window
    assert 0 < seen["spec_decode_num_drafts"] - counted["drafts"] <= 48
    assert 0 <= seen["spec_decode_num_accepted_tokens"] - counted["accepted_tokens"] <= 3 * 48
    independent = 1 + seen["spec_decode_num_accepted_tokens"] / seen["spec_decode_num_drafts"]
    print(f"acceptance: eval {counted['acceptance_length']}, test's own scrape (with the "
          f"warm-up request) {independent:.4f}")
    assert counted["acceptance_length"] == pytest.approx(independent, abs=0.15)
    # Tokens: each request's first from the prefill, then 1 + accepted per verified draft,
    # less what max_tokens cut from the last step (under 3 per request).
    decoded = report["with_draft"]["output_tokens"] - report["with_draft"]["requests"]
    drafted = counted["drafts"] + counted["accepted_tokens"]
    assert 0 <= drafted - decoded <= 3 * report["with_draft"]["requests"]


def test_eval_refuses_servers_that_cannot_measure(shared_servers, tmp_path):
    """The shared server without speculation (max_model_len 512), given as both URLs."""
    server = shared_servers["none"]
    common = ["eval", "--base-url", server.base_url, "--spec-url", server.base_url,
              "--task", TINY_TASK, "--limit", "2"]
    not_speculating = run_cli(*common, "--max-tokens", "8", "--out", str(tmp_path / "a"),
                              timeout=1200)
    too_long = run_cli(*common, "--max-tokens", "500", "--out", str(tmp_path / "b"),
                       timeout=1200)
    print(f"\n{not_speculating.stderr[-600:]}\n{too_long.stderr[-600:]}")
    assert not_speculating.returncode == 2
    assert "exports no vllm:spec_decode_* counters" in not_speculating.stderr
    assert too_long.returncode == 2
    assert "with --max-tokens 500 a request needs" in too_long.stderr
    assert "max_model_len 512" in too_long.stderr


def test_startup_timeout_is_an_option_and_fails_with_the_log(tiny, tmp_path):
    proc = run_cli("eval", "--target", os.path.join(tiny, "target"), "--draft",
                   os.path.join(tiny, "draft"), "--task", TINY_TASK, "--startup-timeout", "2",
                   "--out", str(tmp_path / "eval"), timeout=1200)
    assert proc.returncode == 2
    assert "not healthy after 2s" in proc.stderr and "--startup-timeout" in proc.stderr
    assert "server-without_draft.log ends with" in proc.stderr


DOCUMENTED_URL = "URL=http://127.0.0.1:8000"


def test_lm_eval_clients_give_the_same_answers_with_the_draft(shared_servers, tmp_path):
    """lm-eval's local-chat-completions and local-completions, as docs/evaluation.md runs
    them against a server (its block as written, pointed at the shared pair): the server
    with the draft proposed drafts, the one without none, and both endpoints' greedy
    answers and metrics are the same on both servers."""
    block = docs_bash_block("local-chat-completions", TINY_TASK)
    assert DOCUMENTED_URL in block
    runs, verdicts = {}, {}
    for name, server in shared_servers.items():
        folder = tmp_path / name
        folder.mkdir()
        proc = run_as_written(block, folder, {DOCUMENTED_URL: f"URL={server.base_url}"},
                              timeout=1200)
        verdicts[name] = proc.stdout.strip().splitlines()[-1]
        runs[name] = {endpoint: lm_eval_output(folder / "out" / "lm-eval" / endpoint)
                      for endpoint in ("chat", "completions")}
    print(f"\n{verdicts}")
    proposed = re.fullmatch(r"drafts (\d+), acceptance length ([\d.]+)", verdicts["draft"])
    assert proposed, verdicts  # the server with the draft proposed drafts
    drafts, length = proposed.groups()
    assert int(drafts) > 0 and 1.0 < float(length) <= 4.0
    assert verdicts["none"] == "no drafts proposed"
    for endpoint in ("chat", "completions"):
        base, spec = runs["none"][endpoint], runs["draft"][endpoint]
        # Equal on both servers; an empty greedy answer (the target ends at once) is an
        # answer too, so only a run with no answer at all is wrong.
        assert len(base["answers"]) == 12 and any(base["answers"].values())
        assert spec["answers"] == base["answers"], endpoint
        assert spec["metrics"] == base["metrics"], endpoint
    assert runs["none"]["chat"]["answers"] != runs["none"]["completions"]["answers"]
