"""The plugin as a guest (docs/troubleshooting.md, "What it changes in a process with no
EAGLE3 MLA draft"): a plain MLA target and an ngram server behave with the plugin installed
as they do with vLLM alone (VLLM_PLUGINS=""), token for token, float32."""

from __future__ import annotations

import pytest

from tests.helpers import NO_PLUGIN, engine, served

pytestmark = pytest.mark.engine

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
         "prompt_lookup_min": 1}


def test_a_plain_mla_target_gives_vllms_own_tokens(tiny):
    ours = served(engine(tiny, None))
    alone = served(engine(tiny, None, env=NO_PLUGIN))
    assert ours["drafts"] == alone["drafts"] == 0
    assert ours["token_ids"] == alone["token_ids"]


def test_an_ngram_server_drafts_and_verifies_as_with_vllm_alone(tiny):
    """ngram speculation goes through the rejection sampler and the MLA verification the
    plugin mends on the CPU build: the same tokens as without speculation, and the same
    acceptance as vLLM alone."""
    ours = served(engine(tiny, None, speculative_config=NGRAM))
    alone = served(engine(tiny, None, env=NO_PLUGIN, speculative_config=NGRAM))
    no_speculation = served(engine(tiny, None))
    print(f"\nngram: plugin {ours['acceptance_length']} ({ours['drafts']} drafts), vLLM alone "
          f"{alone['acceptance_length']} ({alone['drafts']} drafts)")
    assert ours["drafts"] > 0 and alone["drafts"] > 0, "no draft proposed"
    assert ours["token_ids"] == alone["token_ids"] == no_speculation["token_ids"]
    assert ours["acceptance_length"] == alone["acceptance_length"]
    assert "vLLM's CPU rejection sampler is mended" in ours["_log"]
