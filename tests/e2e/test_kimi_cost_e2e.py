"""The Kimi-cost target served by vLLM: its greedy tokens are the 6-layer target's, and a
draft written with Kimi's output-of numbering [1, 29, 57] (the K2.7-Coder card's) makes the
plugin capture Kimi's [2, 30, 58] and drafts exactly as the base draft does on the 6-layer
target (fixtures/kimi_cost.py: the extra layers add exact zeros)."""

from __future__ import annotations


import pytest

from tests import engines
from tests.helpers import engine, served
from vllm_kimi_eagle.fixtures import kimi_cost

pytestmark = pytest.mark.engine
NONE, BASE = engines.named("none"), engines.named("draft")
KIMI_COST = {draft: engines.named(f"{kimi_cost.NAME}:{draft or 'none'}")
             for draft in (None, "draft-kimi-cost-output-of")}


@pytest.fixture(scope="module")
def six_layers(tiny):
    return served(engine(tiny, NONE))["token_ids"]


@pytest.fixture(scope="module")
def base_draft(tiny):
    return served(engine(tiny, BASE))


def kimi_cost_engine(tiny, draft):
    """The standard job (helpers.engine) on the Kimi-cost target."""
    return served(engine(tiny, KIMI_COST[draft]))


def test_greedy_tokens_are_the_six_layer_targets(tiny, six_layers):
    deep = kimi_cost_engine(tiny, None)
    assert deep["total_layers"] == 61
    assert deep["token_ids"] == six_layers


def test_kimi_numbering_end_to_end(tiny, six_layers, base_draft):
    run = kimi_cost_engine(tiny, "draft-kimi-cost-output-of")
    assert run["drafts"] > 0, "no draft proposed"
    assert "vLLM will capture the inputs of layers [2, 30, 58]" in run["_log"]
    assert run["aux_layers"] == kimi_cost.KIMI_AUX_LAYER_IDS
    assert run["token_ids"] == six_layers
    print(f"acceptance: Kimi-cost target {run['acceptance_length']} "
          f"{run['acceptance_by_position']}, 6-layer target {base_draft['acceptance_length']} "
          f"{base_draft['acceptance_by_position']}")
    assert run["acceptance_length"] == base_draft["acceptance_length"]
    assert run["acceptance_by_position"] == base_draft["acceptance_by_position"]
