"""lm-eval's own offline `vllm` model with the draft, run as docs/evaluation.md shows it:
the draft is served in lm-eval's process and the greedy answers equal the run without."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import BASE_ENV, CLI_MODULE, REPO, docs_bash_block, lm_eval_output
from vllm_kimi_eagle.tools.evaluation import lm_eval_cli
from vllm_kimi_eagle.tools.evaluation.tasks import TINY_TASK

pytestmark = pytest.mark.engine


def test_lm_eval_vllm_model_serves_the_draft_with_the_same_answers(tiny, tmp_path):
    """The docs' two commands, as written, from a folder laid out as the checkout, on a
    machine whose environment sets no VLLM_CPU_KVCACHE_SPACE (the block sets it)."""
    block = docs_bash_block("lm-eval run --model vllm", TINY_TASK)
    command = block.replace(".venv/bin/vllm-kimi-eagle", f"{sys.executable} -m {CLI_MODULE}")
    command = command.replace("python3 ", f"{sys.executable} ")
    (tmp_path / "eval").symlink_to(os.path.join(REPO, "eval"))
    env = {k: v for k, v in {**os.environ, **BASE_ENV}.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines()
             if line.startswith(f"{lm_eval_cli.PROG}:")]
    print("\n" + "\n".join(lines))
    with_draft, without_draft = lines
    assert "counters over the run: " in with_draft, with_draft  # drafts were proposed
    counters = json.loads(with_draft.split("over the run: ", 1)[1])
    assert counters["drafts"] > 0 and counters["accepted_tokens"] > 0
    assert len(counters["acceptance_by_position"]) == 3
    assert lm_eval_cli.STATS_OFF in without_draft
    logs = proc.stdout + proc.stderr  # vLLM logs to stdout
    assert "vllm-kimi-eagle 0.1.0 loaded" in logs
    assert logs.count("is installed as 'vllm-cpu'") == 2  # the dist alias, said by each run

    out = tmp_path / "out" / "lm-eval"
    spec, base = lm_eval_output(out / "with-draft"), lm_eval_output(out / "without-draft")
    assert len(base["answers"]) == 12 and all(base["answers"].values())
    assert spec["answers"] == base["answers"]
    assert spec["metrics"] == base["metrics"]
    assert "exact_match,strict-match" in base["metrics"]
