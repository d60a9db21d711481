"""eval/scripts, the real-model GPQA runs: valid shell, the documented commands, and the
arguments each run hands to the command as the command's own parser reads them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, docs_text

SCRIPTS = os.path.join(REPO, "eval", "scripts")


def _script(name: str) -> str:
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


@pytest.mark.parametrize("name", sorted(os.listdir(SCRIPTS)))
def test_every_script_is_valid_bash(name):
    assert subprocess.run(["bash", "-n", os.path.join(SCRIPTS, name)]).returncode == 0


def _commands(text: str, program: str) -> list[str]:
    """The commands of a text that start with ``program``, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [" ".join(line.split()) for line in joined.splitlines()
            if line.startswith(program)]


def test_the_eval_script_is_the_documented_command():
    documented = _commands(docs_text(), "vllm-kimi-eagle eval")
    (script,) = _commands(_script("gpqa_kimi_eval.sh"), "vllm-kimi-eagle eval")
    assert script in documented
    assert "--max-model-len=32768" in script and "--max-tokens 16384" in script


# Stands in for the installed command: parses what the script passes with the command's
# own parser (lm-eval's, for `lm-eval`) and prints the model arguments read.
PARSE_ONLY = f"""#!{sys.executable}
import json, sys
from vllm_kimi_eagle.tools import cli
print(json.dumps(cli.parse(sys.argv[1:]).model_args))
"""


def test_the_offline_script_passes_the_draft_in_one_run_only(tmp_path):
    (tmp_path / "vllm-kimi-eagle").write_text(PARSE_ONLY)
    (tmp_path / "vllm-kimi-eagle").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", os.path.join(SCRIPTS, "gpqa_kimi_lm_eval_offline.sh")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    without, with_draft = [json.loads(line) for line in proc.stdout.splitlines()]
    assert "speculative_config" not in without
    assert with_draft.pop("speculative_config") == {
        "method": "eagle3", "model": "lightseekorg/kimi-k2.6-eagle3.1-mla",
        "num_speculative_tokens": 3}
    assert with_draft == without
    assert without["pretrained"] == "moonshotai/Kimi-K2.6"
    assert without["tensor_parallel_size"] == 8 and without["disable_log_stats"] is False
