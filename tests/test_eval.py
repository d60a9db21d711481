"""eval/ and examples/ on the tiny models (issue 6): real servers, real lm-eval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import BASE_ENV, requires_mla_engine
from vllm_kimi_eagle import serving, tiny_corpus
from vllm_kimi_eagle.evaluate import TINY_TASK, EvalError, refuse_non_generative

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# float32 servers: the GPQA-style prompts are far from the tiny target's training text,
# where its choices can be close; float32 keeps batching noise below those margins.
FP32 = ["--dtype", "float32", "--enforce-eager"]


def cli(*args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_kimi_eagle.cli", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **BASE_ENV},
    )


@pytest.mark.parametrize("task", ["gpqa_diamond_zeroshot", "gpqa_main_n_shot"])
def test_multiple_choice_gpqa_is_refused_with_the_reason(task):
    with pytest.raises(EvalError, match="log-likelihood.*never proposes"):
        refuse_non_generative(task)
    proc = cli("eval", "--target", "t", "--draft", "d", "--task", task)
    assert proc.returncode == 2
    assert "multiple-choice" in proc.stderr and "gpqa_diamond_cot_zeroshot" in proc.stderr


def test_generative_tasks_are_accepted():
    for task in ("gpqa_diamond_cot_zeroshot", "gpqa_main_generative_n_shot", TINY_TASK):
        refuse_non_generative(task)


@requires_mla_engine()
def test_eval_end_to_end_on_tiny_models(tiny, tmp_path):
    out = tmp_path / "eval"
    proc = cli(
        "eval", "--target", os.path.join(tiny, "target"), "--draft", os.path.join(tiny, "draft"),
        "--task", TINY_TASK, "--limit", "8", "--max-tokens", "48", "--concurrency", "4",
        *[f"--server-arg={a}" for a in FP32], "--out", str(out),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("report.json", "report.md", "report.png", "server-with_draft.log",
                 "server-without_draft.log"):
        assert (out / name).exists(), name
    report = json.loads((out / "report.json").read_text())
    base, spec = report["without_draft"], report["with_draft"]
    print("\n" + (out / "report.md").read_text())
    assert base["metrics"] == spec["metrics"] and "exact_match,strict-match" in base["metrics"]
    assert report["comparison"]["samples"] == 8
    assert report["comparison"]["identical_answers"], report["comparison"]["disagreements"]
    counters = spec["spec"]
    assert counters["acceptance_length"] > 1
    assert counters["acceptance_length"] == round(
        1 + counters["accepted_tokens"] / counters["drafts"], 4)
    # per-position rates are rounded to 4 decimals in the report
    assert sum(counters["acceptance_by_position"]) * counters["drafts"] == pytest.approx(
        counters["accepted_tokens"], abs=3 * 1e-4 * counters["drafts"])
    assert base["spec"]["drafts"] == 0
    assert base["tokens_per_s"] > 0 and spec["tokens_per_s"] > 0
    assert base["output_tokens"] > 0 and spec["output_tokens"] > 0


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
    assert all(r["completion_tokens"] == 48 for r in together)
    assert [r["text"] for r in together] == alone
    assert counters.drafts > 0


@requires_mla_engine()
def test_offline_example_prints_acceptance(tiny):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", "offline_acceptance.py")],
        capture_output=True, text=True, timeout=900, env={**os.environ, **BASE_ENV},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    print(f"\nexamples/offline_acceptance.py: {summary}")
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
