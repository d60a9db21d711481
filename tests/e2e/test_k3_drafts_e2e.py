"""Kimi-K3 EAGLE3 MLA drafts (vllm_kimi_eagle/draft/draft_positions.py, draft_spec.py): drafts the
builder trains the K3 way (NoPE; NoPE with the output gate; EAGLE3.1 NoPE), served by the
plugin at the acceptance the reference computes for the very sequences served (the draft
as trained, vLLM's counting: fixtures/offline.py served_acceptance), side by side with
vLLM's in-tree class, which ignores mla_use_nope and knows no g_proj. float32, k=3."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from tests import engines
from tests.helpers import (
    captured_engine,
    engine,
    max_diff,
    reference_draft,
    reference_numerics,
    served,
    served_sequences,
    tiny_target,
    TOLERANCE,
)
from vllm_kimi_eagle.fixtures.margins import SERVED_SHARE
from vllm_kimi_eagle.fixtures.offline import served_acceptance
from vllm_kimi_eagle.fixtures.variants import AUX_LAYER_IDS, K3_DRAFTS

pytestmark = pytest.mark.engine

DRAFTS = ["draft", *K3_DRAFTS]
PLUGIN = {name: engines.named(name) for name in DRAFTS}
UPSTREAM = {name: engines.named(f"{name}@upstream") for name in DRAFTS}
NONE = engines.named("none")
NOPE_ADDED, NOPE_ADDED_OFF = engines.named("nope-added"), engines.named("nope-added@nope-off")
AS_TRAINED = SERVED_SHARE  # served acceptance over the trained draft's on the same sequences
# The in-tree class's acceptance over the reference read with RoPE: a reading the draft was
# not trained as proposes with smaller margins, so float32 kernels flip more near-ties
# (0.989 on builder v12's K3 EAGLE3.1 draft); a wrong rotation costs far more (the build's
# DRAFT:served_with_rope margins, promised at 0.15).
AS_ROTATED = 0.98


def expected(tiny: str, draft: str, result: dict, **spec_changes) -> float:
    reference, _ = reference_draft(os.path.join(tiny, draft), **spec_changes)
    return served_acceptance(tiny_target(tiny), reference, served_sequences(result),
                             AUX_LAYER_IDS)


def figures(run: dict) -> str:
    return run["error"][:150] if "error" in run else f"{run['acceptance_length']}"


@pytest.mark.parametrize("draft", DRAFTS)
def test_a_k3_draft_is_served_as_trained(tiny, draft):
    """The base (RoPE) draft is the control: the reference's count on the served sequences
    is vLLM's own when the draft is served right."""
    ours = served(engine(tiny, PLUGIN[draft]))
    assert ours["drafts"] > 0, "no draft proposed"
    assert ours["token_ids"] == served(engine(tiny, NONE))["token_ids"]
    trained = expected(tiny, draft, ours)
    theirs = engine(tiny, UPSTREAM[draft])
    print(f"\n{draft}: plugin {ours['acceptance_length']}, as trained {trained:.4f}, "
          f"vLLM's in-tree class {figures(theirs)}")
    assert ours["acceptance_length"] >= AS_TRAINED * trained
    if draft == "draft-k3-gate":  # the in-tree class has no g_proj to load it into
        assert "g_proj" in theirs["error"]
    else:
        assert served(theirs)["drafts"] > 0, "no draft proposed by the in-tree class"
    if draft == "draft":
        assert served(theirs)["acceptance_length"] == ours["acceptance_length"]
    elif draft != "draft-k3-gate":
        # The in-tree class rotates what was trained unrotated: it serves what the
        # reference computes read with RoPE, another draft, which loses acceptance (by
        # at least the build's margin on these prompts, BUILT.json: fixtures/margins.py).
        rotated = expected(tiny, draft, served(theirs), nope=False)
        print(f"  the reference read with RoPE on the in-tree class's sequences: "
              f"{rotated:.4f}")
        assert served(theirs)["acceptance_length"] >= AS_ROTATED * rotated
        assert served(theirs)["acceptance_length"] < ours["acceptance_length"]
    assert ("NoPE" in ours["_log"]) is (draft != "draft")


def test_nope_and_the_gate_match_the_reference_numerics(tiny):
    """vLLM's run of the plugin's class on the gated NoPE draft vs the reference, tensor by
    tensor on the first prefill (NoPE and the gate both on)."""
    result = served(captured_engine(tiny, PLUGIN["draft-k3-gate"]))
    pairs, first, spec = reference_numerics(os.path.join(tiny, "draft-k3-gate"),
                                            result["captured"])
    assert spec.nope and spec.output_gate
    print(f"\ndraft-k3-gate: max |logits diff| {max_diff(pairs['logits']):.2e} over {first} "
          "prefill tokens")
    for ours, reference in pairs.values():
        torch.testing.assert_close(ours, reference, **TOLERANCE)


@pytest.fixture(scope="module")
def rope_draft_with_nope(tiny, tmp_path_factory):
    """The base draft, trained with RoPE, with "mla_use_nope": true added to its config."""
    folder = tmp_path_factory.mktemp("nope-added") / "draft"
    shutil.copytree(os.path.join(tiny, "draft"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(config, mla_use_nope=True)))
    return str(folder)


def test_the_field_is_honoured_and_the_switch_reads_it_back(tiny, rope_draft_with_nope):
    """Served with the field, the RoPE-trained draft gives what the reference gives reading
    it NoPE; an ignored field would give the base draft's acceptance exactly (same tokens,
    same draft, float32). Which reading scores higher is the build's business: on so short
    a context the rotation carries little, and either may win."""
    base = served(engine(tiny, PLUGIN["draft"]))
    honoured = served(engine(tiny, NOPE_ADDED, draft=rope_draft_with_nope))
    switched = served(engine(tiny, NOPE_ADDED_OFF, draft=rope_draft_with_nope))
    as_nope = expected(tiny, "draft", honoured, nope=True)
    print(f"\nbase draft with mla_use_nope added: served {honoured['acceptance_length']} "
          f"(the reference read NoPE: {as_nope:.4f}); with VLLM_KIMI_EAGLE_DRAFT_NOPE=off "
          f"{switched['acceptance_length']}; as trained {base['acceptance_length']}")
    for run in (base, honoured, switched):
        assert run["drafts"] > 0, "no draft proposed"
        assert run["token_ids"] == base["token_ids"]
    assert honoured["acceptance_length"] >= AS_TRAINED * as_nope
    assert honoured["acceptance_length"] != base["acceptance_length"]
    assert "AMBIGUOUS" in honoured["_log"]
    assert switched["acceptance_length"] == base["acceptance_length"]
