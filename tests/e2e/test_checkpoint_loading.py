"""Bad checkpoints that only loading can find (values, not shapes): the draft class checks
them while vLLM loads it (the checks before serving: tests/integration/test_checkpoints.py)."""

from __future__ import annotations


import pytest

from tests import engines
from tests.helpers import copy_draft, engine, save_tensors

pytestmark = pytest.mark.engine
# A broken copy of a tiny draft, one prompt of 4 tokens (tests/engines.py).
BROKEN = engines.named("broken-copy")


def test_d2t_out_of_range_fails_while_loading(tiny, tmp_path):
    """Values are only read at load time: the draft class checks them there."""
    dest = str(tmp_path / "d2t-range")
    _, tensors = copy_draft(tiny, "draft-pruned", dest)
    tensors["d2t"] = tensors["d2t"] + 10_000
    path = save_tensors(dest, tensors)
    result = engine(tiny, BROKEN, draft=dest)
    assert "error" in result
    assert "'d2t'" in result["_stderr"] and "outside the target vocabulary" in result["_stderr"]
    assert path in result["_stderr"]


def test_non_identity_d2t_with_full_vocabulary_fails_while_loading(tiny, tmp_path):
    dest, tensors = copy_draft(tiny, "draft-torchspec", tmp_path / "d2t-not-identity")
    tensors["d2t"][5] = 3
    path = save_tensors(dest, tensors)
    result = engine(tiny, BROKEN, draft=dest)
    assert "error" in result
    assert "maps draft id 5 to target id 8" in result["_stderr"]
    assert "draft_vocab_size == vocab_size" in result["_stderr"] and path in result["_stderr"]
