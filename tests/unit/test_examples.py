"""The GPU examples are copy-paste commands: they say what the README says (the offline
example, served: tests/e2e/test_examples_e2e.py)."""

from __future__ import annotations

import os

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
