"""eval/ and examples/ on the tiny models (issue 6): real servers, real lm-eval."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import BASE_ENV, requires_mla_engine
from vllm_kimi_eagle import serving, tiny_corpus
from vllm_kimi_eagle.spec_metrics import Scrape, spec_counters, time_per_output_token_ms
from vllm_kimi_eagle.evaluate import (
    TINY_TASK,
    EvalError,
    context_problem,
    refusal,
    server_args,
    speedups,
    task_output_types,
    tiny_task_yaml,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# float32 servers: the GPQA-style prompts are far from the tiny target's training text,
# where its choices can be close; float32 keeps batching noise below those margins.
FP32 = ["--dtype", "float32", "--enforce-eager"]


def cli(*args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_kimi_eagle.cli", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **BASE_ENV},
    )


@pytest.fixture(scope="module")
def task_manager(tmp_path_factory):
    """lm-eval's task index, with our offline task (built once: ~10 s on 2 cores)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=tiny_task_yaml(str(tmp_path_factory.mktemp("tasks"))))


@pytest.mark.parametrize("task, leaf, kind", [
    ("gpqa_diamond_zeroshot", "gpqa_diamond_zeroshot", "multiple_choice"),
    ("gpqa_main_n_shot", "gpqa_main_n_shot", "multiple_choice"),
    ("mmlu", "mmlu_anatomy", "multiple_choice"),  # a group of groups
    ("arc_easy", "arc_easy", "multiple_choice"),
    ("wikitext", "wikitext", "loglikelihood_rolling"),
    ("gpqa", "gpqa_diamond_zeroshot", "multiple_choice"),  # a tag mixing both kinds
])
def test_non_generating_tasks_are_refused_by_output_type(task_manager, task, leaf, kind):
    reason = refusal(task, task_output_types(task_manager, task))
    assert reason is not None, f"{task} was accepted"
    assert f"{leaf} ({kind})" in reason and "never proposes" in reason
    assert "gpqa_diamond_cot_zeroshot" in reason  # what to run instead


@pytest.mark.parametrize("task", ["gpqa_diamond_cot_zeroshot", "gpqa_main_generative_n_shot",
                                  "gsm8k", TINY_TASK])
def test_generating_tasks_are_accepted(task_manager, task):
    types = task_output_types(task_manager, task)
    assert types and set(types.values()) == {"generate_until"}
    assert refusal(task, types) is None


def test_unknown_task_says_so(task_manager):
    with pytest.raises(EvalError, match="no task, group or tag named 'gpqa_diamnd'"):
        task_output_types(task_manager, "gpqa_diamnd")


def test_cli_refuses_before_starting_a_server(tmp_path):
    proc = cli("eval", "--target", "t", "--draft", "d", "--task", "mmlu",
               "--out", str(tmp_path / "eval"))
    assert proc.returncode == 2
    assert "mmlu_anatomy (multiple_choice)" in proc.stderr and "starting vLLM" not in proc.stderr


def test_server_arguments_are_the_users_plus_visible_defaults():
    assert server_args([]) == ["--seed", "0"]
    assert server_args(["--dtype=float32"]) == ["--seed", "0", "--dtype=float32"]
    # A value the user gave is never overridden, in either spelling.
    assert server_args(["--seed=7"]) == ["--seed=7"]
    assert server_args(["--seed", "7"]) == ["--seed", "7"]
    assert "--max-model-len" not in server_args([])


def test_context_problem_gives_the_numbers():
    assert context_problem("t", 100, 412, 512, "http://x") is None
    message = context_problem("gpqa", 900, 16384, 8192, "http://x")
    for words in ("900 tokens", "--max-tokens 16384", "17284 tokens", "max_model_len 8192",
                  "--server-arg=--max-model-len=17284", "lower --max-tokens to 7292"):
        assert words in message, message


def test_speedups_flag_disagreement():
    def run(tokens_per_s, tpot):
        return {"tokens_per_s": tokens_per_s, "mean_time_per_output_token_ms": tpot}

    agree = speedups(run(100, 10.0), run(130, 8.0))
    assert agree["speedup_generation"] == 1.3 and agree["speedup_time_per_output_token"] == 1.25
    assert agree["consistent"] is True
    disagree = speedups(run(100, 6.02), run(179.3, 6.17))  # the figures issue 11 found
    assert disagree["consistent"] is False
    assert speedups(run(100, None), run(130, 8.0))["consistent"] is False


def _report(out) -> dict:
    report = json.loads((out / "report.json").read_text())
    print("\n" + (out / "report.md").read_text())
    return report


def _readme_offline_eval() -> str:
    """The README's offline eval command (the bash block that runs kimi_eagle_gpqa_tiny)."""
    with open(os.path.join(REPO, "README.md")) as f:
        blocks = re.findall(r"```bash\n(.*?)```", f.read(), re.S)
    (block,) = [b for b in blocks if TINY_TASK in b]
    return block


@requires_mla_engine()
def test_readme_offline_eval_runs_as_written(tiny, tmp_path):
    """The README's command, on a machine whose environment sets no VLLM_CPU_KVCACHE_SPACE."""
    command = _readme_offline_eval().replace(".venv/bin/vllm-kimi-eagle",
                                             f"{sys.executable} -m vllm_kimi_eagle.cli")
    command = command.replace("python3 ", f"{sys.executable} ")
    env = {k: v for k, v in {**os.environ, **BASE_ENV}.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
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


def _scrape(server: serving.Server) -> dict:
    """The test's own reading of the spec-decode counters (not the eval's)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict = {}
    for family in text_string_to_metric_families(server.get("/metrics")):
        for sample in family.samples:
            if sample.name.startswith(("vllm:spec_decode_num_", "vllm:generation_tokens_total")):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


@requires_mla_engine()
def test_eval_acceptance_matches_counters_scraped_independently(tiny, tmp_path):
    """A speculating server of the test's own (--spec-url); the test reads its counters
    around the whole eval. The eval's window is the task's requests after one warm-up
    request, so its counts are a little below the test's and its acceptance close."""
    spec = {"method": "eagle3", "model": os.path.join(tiny, "draft"),
            "num_speculative_tokens": 3}
    with serving.running_server(os.path.join(tiny, "target"), str(tmp_path / "spec.log"),
                                spec, ["--seed", "0", *FP32], env=BASE_ENV) as server:
        before = _scrape(server)
        proc = cli("eval", "--target", os.path.join(tiny, "target"), "--spec-url",
                   server.base_url, "--task", TINY_TASK, "--limit", "8", "--max-tokens", "48",
                   "--concurrency", "4", *[f"--server-arg={a}" for a in FP32],
                   "--out", str(tmp_path / "eval"))
        after = _scrape(server)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = _report(tmp_path / "eval")
    counted = report["with_draft"]["spec"]
    seen = {k.removeprefix("vllm:").removesuffix("_total"): after[k] - before.get(k, 0.0)
            for k in after}
    assert counted["drafts"] > 0
    assert report["with_draft"]["server_args"] is None  # a server of ours, not started there
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


@requires_mla_engine()
def test_eval_refuses_servers_that_cannot_measure(tiny, tmp_path):
    """One server without speculation and a short max_model_len, given as both URLs."""
    with serving.running_server(os.path.join(tiny, "target"), str(tmp_path / "base.log"),
                                None, ["--max-model-len", "256", *FP32], env=BASE_ENV) as server:
        common = ["eval", "--base-url", server.base_url, "--spec-url", server.base_url,
                  "--task", TINY_TASK, "--limit", "2"]
        not_speculating = cli(*common, "--max-tokens", "8", "--out", str(tmp_path / "a"))
        too_long = cli(*common, "--max-tokens", "240", "--out", str(tmp_path / "b"))
    print(f"\n{not_speculating.stderr[-600:]}\n{too_long.stderr[-600:]}")
    assert not_speculating.returncode == 2
    assert "exports no vllm:spec_decode_* counters" in not_speculating.stderr
    assert too_long.returncode == 2
    assert "with --max-tokens 240 a request needs" in too_long.stderr
    assert "max_model_len 256" in too_long.stderr


@requires_mla_engine()
def test_dead_server_fails_with_its_log_tail(tiny, tmp_path):
    log = str(tmp_path / "server.log")
    with pytest.raises(serving.ServerError) as err:
        with serving.running_server(os.path.join(tiny, "target"), log, None,
                                    ["--max-model-len", "256", *FP32], env=BASE_ENV) as server:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()
            server.model_name()
    message = str(err.value)
    print(f"\n{message[:400]}")
    assert "exited with code -9 while it was in use" in message and log in message
    assert "Application startup complete" in message  # the tail of the server's log


@requires_mla_engine()
def test_startup_timeout_is_an_option_and_fails_with_the_log(tiny, tmp_path):
    proc = cli("eval", "--target", os.path.join(tiny, "target"), "--draft",
               os.path.join(tiny, "draft"), "--task", TINY_TASK, "--startup-timeout", "2",
               "--out", str(tmp_path / "eval"))
    assert proc.returncode == 2
    assert "not healthy after 2s" in proc.stderr and "--startup-timeout" in proc.stderr
    assert "server-without_draft.log ends with" in proc.stderr


@requires_mla_engine()
def test_sixteen_concurrent_requests_match_the_same_requests_alone(tiny, tmp_path):
    prompts = tiny_corpus.demo_prompts(16, seed=99)
    spec = {"method": "eagle3", "model": os.path.join(tiny, "draft"),
            "num_speculative_tokens": 3}
    with serving.running_server(os.path.join(tiny, "target"), str(tmp_path / "server.log"),
                                spec, ["--max-model-len", "512", "--seed", "0", *FP32],
                                env=BASE_ENV) as server:
        model = server.model_name()
        alone = [serving.chat(server, model, p, 48)["text"] for p in prompts]
        with ThreadPoolExecutor(max_workers=16) as pool:
            together = list(pool.map(lambda p: serving.chat(server, model, p, 48), prompts))
        counters = server.spec_counters()
    print(f"\n16 concurrent requests: acceptance length {counters.acceptance_length:.3f}")
    assert counters.drafts > 0
    assert all(r["completion_tokens"] == 48 for r in together)
    assert [r["text"] for r in together] == alone


@requires_mla_engine()
def test_offline_example_prints_acceptance(tiny):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", "offline_acceptance.py")],
        capture_output=True, text=True, timeout=900, env={**os.environ, **BASE_ENV},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    print(f"\nexamples/offline_acceptance.py: {summary}")
    assert summary["drafts"] > 0
    assert summary["acceptance_length"] > 1 and len(summary["acceptance_by_position"]) == 3


def test_gpu_examples_are_consistent_with_the_readme():
    """The serving examples are copy-paste commands; check they say what the README says."""
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    for name, draft in (("serve_kimi_k25_eagle3_mla.sh", "lightseekorg/kimi-k2.5-eagle3-mla"),
                        ("serve_kimi_k26_eagle3.1_mla.sh", "lightseekorg/kimi-k2.6-eagle3.1-mla")):
        with open(os.path.join(REPO, "examples", name)) as f:
            script = f.read()
        assert '"method": "eagle3"' in script and draft in script
        assert "--tensor-parallel-size 8" in script and '"num_speculative_tokens": 3' in script
        assert f"examples/{name}" in readme
    proc = subprocess.run(["bash", "-n", os.path.join(REPO, "examples", "eval_kimi_k26.sh")])
    assert proc.returncode == 0


def _commands(text: str) -> list[str]:
    """The `vllm-kimi-eagle eval` commands of a text, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [" ".join(line.split()) for line in joined.splitlines()
            if line.startswith("vllm-kimi-eagle eval")]


def test_gpu_eval_example_is_the_readme_command():
    with open(os.path.join(REPO, "README.md")) as f:
        readme = _commands(f.read())
    with open(os.path.join(REPO, "examples", "eval_kimi_k26.sh")) as f:
        example = _commands(f.read())
    assert len(example) == 1 and example[0] in readme, (example, readme)
    assert "--max-model-len=32768" in example[0] and "--max-tokens 16384" in example[0]


METRICS_TEXT = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_drafts_total{{engine="1",model_name="m"}} 10.0
vllm:spec_decode_num_drafts_created{{engine="0",model_name="m"}} 1.7e9
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="0"}} {pos0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="1"}} 2.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {tokens}
# TYPE vllm:request_decode_time_seconds histogram
vllm:request_decode_time_seconds_bucket{{engine="0",le="+Inf"}} {requests}
vllm:request_decode_time_seconds_sum{{engine="0"}} {decode}
vllm:request_decode_time_seconds_count{{engine="0"}} {requests}
"""


def test_one_metrics_parser_sums_engines_and_subtracts_scrapes():
    before = Scrape.parse(METRICS_TEXT.format(drafts=5.0, pos0=4.0, tokens=100.0,
                                              requests=2.0, decode=1.0))
    after = Scrape.parse(METRICS_TEXT.format(drafts=25.0, pos0=20.0, tokens=302.0,
                                             requests=4.0, decode=3.0))
    assert spec_counters(after).drafts == 35.0  # engines 0 and 1
    window = after - before
    counters = spec_counters(window)
    assert counters.drafts == 20.0 and counters.accepted_per_pos == {0: 16.0, 1: 0.0}
    # 2 requests, 202 tokens of which 2 came from prefills: 2 s / 200 tokens
    assert time_per_output_token_ms(window) == 10.0
