"""tests/unit: what a test changes in vLLM (the plugin's installers, journaled by
vllm_kimi_eagle/patching.py) is undone when it ends, so that no outcome depends on the
order in which the tests run."""

import pytest

from vllm_kimi_eagle import patching


@pytest.fixture(autouse=True)
def undo_vllm_changes():
    start = patching.mark()
    yield
    patching.restore(since=start)
