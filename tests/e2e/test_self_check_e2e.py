"""The self-check (serving/self_check.py) in real engines: every engine the suite starts
with the plugin's draft passes it (read off the standard engine's log, no start of its
own), and an engine where vLLM is made to diverge after the plugin decided
(tests/divergences.py: the capture ids shifted, the greedy shortcut reset, the class
swapped, the rope override dropped) does not start, its error naming what was planned and
what vLLM enacted. With VLLM_KIMI_EAGLE_SELF_CHECK=warn the shifted ids start, and serve
what the check would have stopped: a draft reading other layers."""

from __future__ import annotations

import pytest

from tests import engines
from tests.helpers import engine, served

pytestmark = pytest.mark.engine

PLUGIN, UPSTREAM = engines.named("draft"), engines.named("draft@upstream")
# divergence -> the line of the refusal (its engine: tests/engines.py, the rope override
# dropped under vLLM's class with a base of 10000 asked)
REFUSED = {
    "capture-ids-shifted": "capture ids on the target: planned [2, 3, 5], enacted [3, 4, 6]",
    "shortcut-reset": "greedy shortcut (use_local_argmax_reduction): planned True, enacted "
                      "False",
    "class-swapped": "class serving the draft: planned plugin's, enacted "
                     "vllm.model_executor.models.deepseek_eagle3:",
    "rope-override-dropped": "draft as built: rope_base: planned 10000.0, built 50000.0",
}
assert set(REFUSED) == set(engines.DIVERGENCES)
DIVERGED = {d: engines.named(f"draft@diverge:{d}") for d in REFUSED}
SHIFTED_WARNED = engines.named("draft@diverge:capture-ids-shifted+warn")


def test_every_engine_with_the_plugins_draft_passes_the_check(tiny):
    """The suite's standard engines of the plugin's class and of vLLM's: each worker
    logs that vLLM enacted the plan, and in well under a millisecond per fact."""
    for eng in (PLUGIN, UPSTREAM):
        result = engine(tiny, eng)
        assert served(result)["drafts"] > 0, "no draft proposed"
        line = next((line for line in result["_log"].splitlines()
                     if "self-check (tp0): vLLM enacted what the plugin decided" in line), None)
        assert line is not None, result["_log"][-3000:]
        assert "capture ids [2, 3, 5]" in line, line
        seconds = float(line.rsplit("(read in ", 1)[1].split(" ms")[0]) / 1000
        print(f"\n{eng.name}: {line.split('vllm-kimi-eagle: ')[1]}; start "
              f"{result['engine_seconds']} s")
        assert seconds < 0.01 * result["engine_seconds"], (seconds, result["engine_seconds"])


@pytest.mark.parametrize("divergence", list(REFUSED))
def test_vllm_made_to_diverge_after_the_decision_is_refused_at_start_up(tiny, divergence):
    words = REFUSED[divergence]
    result = engine(tiny, DIVERGED[divergence])
    print(f"\n{divergence}: {result.get('error', 'started')[:300]}")
    assert "error" in result, f"{divergence}: the engine started"
    assert "SelfCheckError" in result["error"] or "SelfCheckError" in result["_log"], \
        result["error"][:2000]
    assert words in result["_log"], (divergence, result["_log"][-4000:])
    assert "VLLM_KIMI_EAGLE_SELF_CHECK=warn" in result["_log"]


def test_the_warn_switch_starts_it_and_the_draft_then_reads_other_layers(tiny):
    """What the check stops: the same shift served, the warning logged, the acceptance
    the base draft gives reading the wrong layers (the build's every-id-late margin)."""
    right = served(engine(tiny, PLUGIN))
    shifted = engine(tiny, SHIFTED_WARNED)
    assert "error" not in shifted, shifted.get("error", "")[:2000]
    shifted = served(shifted)
    print(f"\nshifted by vLLM: acceptance {shifted['acceptance_length']} (as planned "
          f"{right['acceptance_length']})")
    assert shifted["drafts"] > 0, "no draft proposed"
    assert "vLLM did not do what the plugin decided: capture ids on the target" in \
        shifted["_log"]
    assert shifted["acceptance_length"] < right["acceptance_length"] - 0.15
