"""The margins a build of the tiny models promises (fixtures/margins.py), without building
one: which figures break a promise, the words of the failure, the NoPE draft served as
vLLM's in-tree class serves it, and the calibrate tests' prompt count."""

from __future__ import annotations

import pytest
import torch

from vllm_kimi_eagle.fixtures import margins
from vllm_kimi_eagle.fixtures import wrong_servings as ws
from vllm_kimi_eagle.fixtures.variants import MLA_DIMS, ROPE, TRAINED, trained_spec


def figures(cost_calibrate: float, cost_suite: float, needed: int | None = 10,
            minimum: float = 0.05, decided_on=(margins.CALIBRATE, margins.SUITE)) -> dict:
    def side(cost):
        return {"right": 2.6, "wrong": round(2.6 - cost, 4), "cost": cost, "prompts": 16,
                "prompts_to_decide": needed}
    return {"what": "every capture id one layer late", "minimum": minimum,
            "decided_on": list(decided_on),
            margins.CALIBRATE: side(cost_calibrate), margins.SUITE: side(cost_suite),
            "cost": min(cost_calibrate, cost_suite), "prompts_to_decide": needed}


def test_a_build_that_keeps_every_promise_passes():
    assert margins.problems({"late": figures(0.3, 0.2)}, base_acceptance=2.6) == []
    margins.check({"late": figures(0.3, 0.2)}, 2.6, "some CPU", 1, "/nowhere")


@pytest.mark.parametrize("cost_calibrate, cost_suite, where", [
    (0.01, 0.3, "calibrate_prompts"), (0.3, 0.04, "suite_prompts")])
def test_a_margin_below_its_minimum_on_either_prompt_set_fails(cost_calibrate, cost_suite,
                                                                where):
    (line,) = margins.problems({"late": figures(cost_calibrate, cost_suite)}, 2.6)
    assert line.startswith("late: every capture id one layer late costs") and where in line
    assert "below the minimum 0.05" in line


def test_a_margin_counts_only_on_the_prompts_its_tests_decide_on():
    weak_on_suite = figures(0.3, 0.01, decided_on=(margins.CALIBRATE,))
    assert margins.problems({"late": weak_on_suite}, 2.6) == []
    undecidable = figures(0.3, 0.3, needed=None, decided_on=(margins.SUITE,))
    assert margins.problems({"late": undecidable}, 2.6) == []


@pytest.mark.parametrize("needed", [None, margins.MOST_PROMPTS_TO_DECIDE + 1])
def test_a_margin_too_noisy_to_decide_fails(needed):
    (line,) = margins.problems({"eagle3:every_id_late": figures(0.3, 0.3, needed=needed)},
                               2.6)
    assert f"more than {margins.MOST_PROMPTS_TO_DECIDE}" in line


def test_a_cost_no_test_decides_by_a_count_needs_no_count():
    """A norm left unloaded must cost what it promises; no test decides it on a fixed
    number of calibrate's prompts, so a noisier cost is no broken promise (the AMD EPYC
    build of v16: the K3 NoPE draft's final norm, 0.180, decided in 46)."""
    noisy = figures(0.18, 0.18, needed=46, minimum=0.15, decided_on=(margins.CALIBRATE,))
    assert margins.problems({"eagle3-k3-nope:norm_weight_unloaded": noisy}, 2.6) == []
    weak = figures(0.1, 0.1, needed=46, minimum=0.15, decided_on=(margins.CALIBRATE,))
    assert margins.problems({"eagle3-k3-nope:norm_weight_unloaded": weak}, 2.6)
    assert set(margins.CALIBRATE_DECIDES) <= {m.name for m in margins.MARGINS}


def test_a_ranking_the_compare_test_cannot_decide_fails():
    ranking = figures(0.3, 0.3, needed=margins.MOST_PROMPTS_TO_DECIDE + 1,
                      decided_on=(margins.COMPARE,))
    ranking[margins.COMPARE] = ranking[margins.CALIBRATE]
    (line,) = margins.problems({"eagle3.1_over_eagle3": ranking}, 2.6)
    assert f"more than {margins.MOST_PROMPTS_TO_DECIDE}" in line


def test_the_ranking_compare_asserts_is_promised_on_compares_prompts():
    (ranking,) = [m for m in margins.MARGINS if m.instead]
    assert (ranking.draft, ranking.instead) == ("eagle3.1", "eagle3")
    assert ranking.decided_on == (margins.COMPARE,) and ranking.minimum >= 0.1


@pytest.mark.parametrize("acceptance", [margins.REALISTIC[0] - 0.01, margins.REALISTIC[1] + 0.01])
def test_a_base_draft_stronger_or_weaker_than_real_drafts_fails(acceptance):
    (line,) = margins.problems({}, acceptance)
    assert "outside [2.3, 3.4]" in line


def test_the_failure_names_the_margin_the_cpu_the_seed_and_the_file():
    with pytest.raises(margins.WeakBuild) as caught:
        margins.check({"late": figures(0.01, 0.3)}, 2.6, "GenuineIntel, Xeon", 7, "/b/tiny")
    words = str(caught.value)
    for part in ("GenuineIntel, Xeon", "seed 7", "late: every capture id", "0.010",
                 "/b/tiny/BUILT.json", "--seed N"):
        assert part in words, part


def test_every_margin_reads_a_trained_draft_and_says_what_it_does():
    from vllm_kimi_eagle.fixtures.variants import TRAINED

    for margin in margins.MARGINS:
        assert margin.draft in TRAINED and (margin.minimum is None or margin.minimum > 0)
        assert set(margin.decided_on) <= {margins.CALIBRATE, margins.SUITE, margins.COMPARE}
        assert margin.decided_on
        assert (margin.serving is None) == bool(margin.instead), margin
        assert margin.instead in (None, *TRAINED) and margin.instead != margin.draft
        if margin.serving:
            assert margin.name == f"{margin.draft}:{margin.serving.name}", margin
            assert margin.serving.kind in ws.SERVED, margin
        if margin.serving and margin.serving.kind == "served_with_rope":
            assert dict(TRAINED[margin.draft].config).get("mla_use_nope"), margin


def _draft_and_output(trained: str):
    """A seeded reference draft of ``TRAINED[trained]``'s config, and a function giving its
    first step's output over fixed random tokens and captured states."""
    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft

    torch.manual_seed(0)
    draft = ReferenceDraft(trained_spec(trained), dict(ROPE)).eval()
    tokens = torch.randint(0, 500, (1, 12))
    states = torch.randn(1, 10, 3 * MLA_DIMS["hidden_size"])

    def output():
        with torch.no_grad():
            (out, _), = draft.unroll(tokens[:, 1:11], draft.combine(states),
                                     torch.arange(10)[None], 1)
        return out

    return draft, output


def test_a_nope_draft_served_with_rope_computes_another_draft_and_comes_back():
    draft, output = _draft_and_output("eagle3-k3-nope")
    as_trained = output()
    with ws.served_with_rope(draft):
        rotated = output()
    assert not torch.allclose(rotated[0, 1:], as_trained[0, 1:], atol=1e-4)
    # The first position attends only to itself: a rotation changes nothing there but
    # the softmax scale, which one key cannot feel.
    torch.testing.assert_close(rotated[0, 0], as_trained[0, 0])
    torch.testing.assert_close(output(), as_trained)  # the draft as trained again


def test_the_captured_states_are_what_vllm_captures():
    """Layer id n is the input of layer n; the id after the last layer, the last layer's
    output before the final norm (transformers' last hidden state is normed)."""
    from vllm_kimi_eagle.fixtures.offline import captured_states
    from vllm_kimi_eagle.fixtures.target import target_model

    torch.manual_seed(0)
    target = target_model().eval()
    ids = torch.randint(0, 300, (1, 9))
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
        logits, states = captured_states(target, ids)
    layers = target.config.num_hidden_layers
    assert len(states) == layers + 1
    for n in range(layers):
        torch.testing.assert_close(states[n], out.hidden_states[n])
    assert not torch.allclose(states[layers], out.hidden_states[layers])
    torch.testing.assert_close(target.model.norm(states[layers]), out.hidden_states[layers])
    torch.testing.assert_close(logits, out.logits)


def test_every_part_the_plugin_reads_has_a_promised_margin_on_every_sensitive_draft():
    """Each norm unloaded, q_a and kv_a layernorm skipped: promised at
    SINGLE_PART_MINIMUM on calibrate's prompts; each capture id one off and each pair
    swapped at CAPTURE_MINIMUM; the rope base of every rotated draft at ROPE_BASE_MINIMUM,
    and every NoPE draft served with RoPE at SERVED_WITH_ROPE_MINIMUM."""
    names = {m.name: m for m in margins.MARGINS}
    assert len(names) == len(margins.MARGINS)
    for draft in ws.EVERY_PART:
        promised = {n.split(":", 1)[1] for n, m in names.items()
                    if m.draft == draft and ":" in n and m.minimum is not None}
        assert {"input_layernorm_weight_unloaded", "post_attention_layernorm_weight_unloaded",
                "self_attn.kv_a_layernorm_skipped", "self_attn.q_a_layernorm_skipped",
                "self_attn.q_a_layernorm_weight_unloaded"} <= promised, (draft, promised)
    assert "eagle3.1:fc_norm.2_weight_unloaded" in names
    # The final norm too: scaled where the LM head is the draft's own, taught elsewhere.
    for draft in ws.EVERY_PART:
        assert names[f"{draft}:norm_weight_unloaded"].minimum == ws.SINGLE_PART_MINIMUM
    for draft in ws.EVERY_PART:
        rope = names.get(f"{draft}:rope_base")
        nope = dict(TRAINED[draft].config).get("mla_use_nope")
        assert (rope is None) == bool(nope), draft
        assert nope or rope.minimum == ws.ROPE_BASE_MINIMUM, draft
        assert names[f"{draft}:self_attn.q_a_layernorm_skipped"].minimum == \
            ws.SINGLE_PART_MINIMUM
    served_with_rope = [m for m in margins.MARGINS
                        if m.serving and m.serving.kind == "served_with_rope"]
    assert {m.draft for m in served_with_rope} == {
        d for d in ws.EVERY_PART if dict(TRAINED[d].config).get("mla_use_nope")}
    assert all(m.minimum == ws.SERVED_WITH_ROPE_MINIMUM for m in served_with_rope)
    for draft in ws.EVERY_PART:
        capture = {n.split(":", 1)[1]: m.minimum for n, m in names.items()
                   if m.draft == draft and m.serving and m.serving.kind == "capture"
                   and not n.endswith(("every_id_early", "every_id_late"))}
        ids = {n.split("_id_")[0] for n in capture if "_id_" in n}
        # The late draft's [3, 4, 5]: its second id cannot move alone without a repeat.
        expected = {"first", "third"} | ({"second"} if draft != "eagle3-late" else set())
        assert ids == expected, (draft, capture)
        assert {"first_second_swapped", "first_third_swapped",
                "second_third_swapped"} <= set(capture), (draft, capture)
        assert set(capture.values()) == {ws.CAPTURE_MINIMUM}, (draft, capture)
    assert names["eagle3.1:every_id_late"].minimum == ws.CAPTURE_MINIMUM


@pytest.mark.parametrize("name", ["self_attn.q_a_layernorm_weight_unloaded",
                                  "fc_norm.1_weight_unloaded", "self_attn.kv_a_layernorm_skipped",
                                  "fc_norm_skipped", "norm_skipped", "rope_base"])
def test_a_part_served_wrong_changes_the_draft_and_comes_back(name):
    draft, output = _draft_and_output("eagle3.1")
    with torch.no_grad():
        for param_name, p in draft.named_parameters():
            if "norm" in param_name:
                p.uniform_(0.5, 2.0)
    as_trained = output()
    with ws.served_wrong(ws.named(name), None, draft, (2, 3, 5)) as read:
        wrong = output()
    assert read.capture == (2, 3, 5) and read.states is None
    assert not torch.allclose(wrong[0, 1:], as_trained[0, 1:], atol=1e-4)
    torch.testing.assert_close(output(), as_trained)


def test_every_single_part_floor_is_above_twice_the_suite_s_slack():
    """A draft served right must reach SERVED_SHARE of the reference's acceptance; a part
    served wrong must cost more than twice what that share leaves at the highest
    acceptance the build allows, or a misread part could pass as rounding."""
    slack = (1 - margins.SERVED_SHARE) * margins.REALISTIC[1]
    single = [m for m in margins.MARGINS if ":" in m.name and m.minimum is not None]
    assert len(single) >= 70
    for m in single:
        assert m.minimum > 2 * slack, (m.name, m.minimum, slack)
