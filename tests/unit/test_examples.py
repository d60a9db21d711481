"""The GPU examples are copy-paste commands: they say what the README says (the offline
example, served: tests/e2e/test_examples_e2e.py)."""

from __future__ import annotations

import os
import re
import subprocess

from tests.helpers import REPO, docs_text


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


def test_gpu_eval_example_is_the_documented_command():
    readme = _commands(docs_text())
    with open(os.path.join(REPO, "examples", "eval_kimi_k26.sh")) as f:
        example = _commands(f.read())
    assert len(example) == 1 and example[0] in readme, (example, readme)
    assert "--max-model-len=32768" in example[0] and "--max-tokens 16384" in example[0]
