"""calibrate's pure parts: the candidate readings, today's reading, the setting to apply,
the prompts file, and the decision with its noise."""

from __future__ import annotations

import json

import pytest
import torch

from vllm_kimi_eagle.draft.layer_ids import CONVENTION_ENV, CONVENTION_KEY, IDS_KEY
from vllm_kimi_eagle.draft.rope_override import ROPE_THETA_ENV
from vllm_kimi_eagle.tools.calibrate import candidates, scoring
from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError
from vllm_kimi_eagle.tools.calibrate.decision import decide
from vllm_kimi_eagle.tools.calibrate.prompts import is_tiny_target, read_prompts


def nested(ids, **extra):
    return {"eagle_config": {IDS_KEY: ids}, "rope_theta": 50000.0, **extra}


def captures(readings):
    return [(list(r.capture_ids), r.rope_theta) for r in readings]


def test_readings_are_as_written_and_plus_one_within_the_target():
    got = candidates.readings(nested([2, 3, 5]), 6, can_capture_after_last=True)
    assert captures(got) == [([2, 3, 5], None), ([3, 4, 6], None)]
    assert got[0].convention == "input-of" and got[1].convention == "output-of"
    # Capture after the last layer needs vLLM 0.25.1; without it [3, 4, 6] is out.
    assert captures(candidates.readings(nested([2, 3, 5]), 6, False)) == [([2, 3, 5], None)]
    # Output-of [0, ...] would capture the embeddings, which vLLM cannot.
    assert captures(candidates.readings(nested([0, 2, 4]), 6, True)) == [([1, 3, 5], None)]


def test_two_lists_give_the_same_layers_once():
    config = {IDS_KEY: [2, 3, 5], "eagle_config": {IDS_KEY: [5, 3, 2]}, "rope_theta": 1.0}
    got = candidates.readings(config, 6, True)
    assert captures(got) == [([2, 3, 5], None), ([3, 4, 6], None)]
    assert got[0].labels == (f"{IDS_KEY} as written (input-of)",
                             f"eagle_config.{IDS_KEY} as written (input-of)")


def test_rope_bases_multiply_the_readings_and_the_config_base_is_not_repeated():
    got = candidates.readings(nested([2, 3, 5]), 6, True, rope_thetas=(10000.0, 50000.0))
    assert captures(got) == [([2, 3, 5], None), ([2, 3, 5], 10000.0),
                             ([3, 4, 6], None), ([3, 4, 6], 10000.0)]


def test_no_ids_means_vllms_default():
    got = candidates.readings({"rope_theta": 1.0}, 61, True)
    assert captures(got) == [([2, 30, 58], None)] and got[0].convention == "vllm-default"


def test_todays_reading_is_the_resolvers():
    today, line = candidates.current_reading(nested([1, 2, 4]), 6, True, environ={})
    assert today == (2, 3, 5) and "output-of" in line
    refused, why = candidates.current_reading(nested([4, 5, 9]), 6, True, environ={})
    assert refused is None and why.startswith("refused: ")


def test_the_setting_names_the_convention_or_the_layers_and_the_rope_base():
    config = nested([2, 3, 4])
    late = next(r for r in candidates.readings(config, 6, True) if r.capture_ids == (3, 4, 5))
    assert candidates.setting(late, config) == {
        "config.json": {CONVENTION_KEY: "output-of"},
        "environment": {CONVENTION_ENV: "output-of"}}
    # Against the training tool that wrote the ids (Model-Optimizer: output-of), a
    # convention in config.json would be refused: the environment is the one way.
    modelopt = {"eagle_config": {IDS_KEY: [2, 3, 4], "parallel_draft_step": 1}}
    as_written = next(r for r in candidates.readings(modelopt, 6, True)
                      if r.capture_ids == (2, 3, 4))
    assert candidates.setting(as_written, modelopt) == {
        "config.json": {}, "environment": {CONVENTION_ENV: "input-of"}}
    rope = next(r for r in candidates.readings(config, 6, True, (10000.0,)) if r.rope_theta)
    assert candidates.setting(rope, config)["environment"][ROPE_THETA_ENV] == "10000"
    assert candidates.setting(rope, config)["config.json"]["rope_theta"] == 10000.0


def test_a_draft_that_sets_mla_use_nope_is_measured_both_ways():
    """inspect's AMBIGUOUS (mla_use_nope without a TorchSpec marker: NoPE today) and a
    TorchSpec export (RoPE today) each get the other reading as a twin of every layer
    reading; a draft that does not set the field gets none."""
    from vllm_kimi_eagle.draft.draft_positions import MEASURED_KEY, NOPE_ENV, NOPE_KEY

    assert [r.nope for r in candidates.readings(nested([2, 3, 5]), 6, True)] == [None, None]
    ambiguous = nested([2, 3, 5], mla_use_nope=True)
    got = candidates.readings(ambiguous, 6, True)
    assert [(list(r.capture_ids), r.nope) for r in got] == [
        ([2, 3, 5], None), ([2, 3, 5], False), ([3, 4, 6], None), ([3, 4, 6], False)]
    assert got[1].name == "[2, 3, 5], RoPE"
    assert [candidates.served_nope(r, ambiguous) for r in got] == [True, False, True, False]
    torchspec = nested([2, 3, 5], mla_use_nope=True, _torchspec_version="0.1")
    assert [r.nope for r in candidates.readings(torchspec, 6, True)][:2] == [None, True]
    # The twin's copy says its reading in config.json, over the tool's fingerprint.
    twin = candidates.setting(got[1], ambiguous)
    assert {k: twin["config.json"][k] for k in (NOPE_KEY, MEASURED_KEY)} == {
        NOPE_KEY: False, MEASURED_KEY: True} and twin["environment"][NOPE_ENV] == "off"
    # Today's reading: said only where a verdict measured it.
    assert NOPE_KEY not in candidates.setting(got[0], ambiguous)["config.json"]
    kept = candidates.setting(got[0], ambiguous, measured=True)["config.json"]
    assert (kept[NOPE_KEY], kept[MEASURED_KEY]) == (True, True)


def test_a_measured_reading_is_read_as_written_and_not_ambiguous():
    from tests.records import decide_positions

    twin = decide_positions(nested([2, 3, 5], mla_use_nope=True, _torchspec_version="0.1",
                                   mla_use_nope_measured=True), {})
    assert twin.nope is True and not twin.ambiguous and "measured" in twin.reason
    rope = decide_positions(nested([2, 3, 5], mla_use_nope=False,
                                   mla_use_nope_measured=True), {})
    assert rope.nope is False and not rope.ambiguous


def test_a_target_without_mla_is_refused_with_its_file():
    with pytest.raises(CalibrationError, match="t/config.json: model_type 'llama'"):
        candidates.check_target({"model_type": "llama", "num_hidden_layers": 4}, "t")
    assert candidates.check_target({"text_config": {"kv_lora_rank": 512,
                                                    "num_hidden_layers": 61}}, "t") == 61


def test_prompts_file_forms_and_errors(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join([json.dumps("plain text"), json.dumps({"prompt": "p"}),
                               json.dumps([{"role": "user", "content": "hi"}]),
                               json.dumps({"messages": [{"role": "user", "content": "x"}]}),
                               ""]))
    assert read_prompts(str(path)) == [
        {"prompt": "plain text"}, {"prompt": "p"},
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "x"}]}]
    path.write_text('"fine"\n{"messages": [{"content": "no role"}]}\n')
    with pytest.raises(CalibrationError, match=r"p.jsonl, line 2: not a prompt"):
        read_prompts(str(path))
    path.write_text("{broken\n")
    with pytest.raises(CalibrationError, match="line 1"):
        read_prompts(str(path))
    with pytest.raises(CalibrationError, match="cannot be read"):
        read_prompts(str(tmp_path / "missing.jsonl"))


def _rows(lengths):
    return [{"reading": f"r{i}", "acceptance_length": a} for i, a in enumerate(lengths)]


def test_decision_is_the_paired_verdict_over_prompts():
    positions = torch.full((20,), 50.0)
    steady = {0: torch.full((20, 3), 30.0), 1: torch.full((20, 3), 20.0)}
    steady[0][::2] += 1.0  # not the same on every prompt: a spread to have an interval
    per_prompt = {i: scoring.per_prompt(m, positions) for i, m in steady.items()}
    won = decide(_rows([2.8, 2.2]), current=1, per_prompt=per_prompt)
    assert won["status"] == "change" and won["row"] == 0 and won["beats_current"]
    assert won["difference"]["status"] == "higher" and won["difference"]["pairs"] == 20
    assert won["why"].startswith("r0 is higher than r1 in offline acceptance length per "
                                 "prompt by 0.6")
    # Today's reading best and clearly ahead of the runner-up: kept, decided.
    kept = decide(_rows([2.8, 2.2]), current=0, per_prompt=per_prompt)
    assert kept["status"] == "keep" and kept["row"] == 0 and not kept["beats_current"]
    # Ahead on average, but only thanks to two prompts: undecided, today's reading stays,
    # with the interval's two ends.
    lucky = torch.full((20, 3), 20.0)
    lucky[:2] = 45.0
    noisy = {0: lucky, 1: torch.full((20, 3), 21.0)}
    per_prompt = {i: scoring.per_prompt(m, positions) for i, m in noisy.items()}
    mean0 = 1 + float(lucky.sum() / positions.sum())
    tie = decide(_rows([mean0, 2.26]), current=1, per_prompt=per_prompt)
    assert tie["status"] == "undecided" and tie["row"] == 1 and not tie["beats_current"]
    assert tie["difference"]["low"] < 0 < tie["difference"]["high"]
    assert "95% interval" in tie["why"] and "today's reading stays" in tie["why"]
    # A stricter look (several rounds planned) asks for more: the same data, undecided.
    close = {0: torch.full((20, 3), 21.0), 1: torch.full((20, 3), 20.0)}
    close[0][::2] += 1.5
    close[0][1::2] -= 0.8
    per_prompt = {i: scoring.per_prompt(m, positions) for i, m in close.items()}
    assert decide(_rows([2.3, 2.2]), 1, per_prompt)["status"] == "change"
    assert decide(_rows([2.3, 2.2]), 1, per_prompt, confidence=0.999999)["status"] == \
        "undecided"
    # Today's reading refused by the plugin: the best reading is what to apply, by the
    # mean over prompts (reading 0 here), whatever the pooled figures say.
    applied = decide(_rows([2.1, 2.5]), None, per_prompt)
    assert applied["row"] == 0 and applied["status"] == "apply"


def test_one_figure_picks_the_lead_and_judges_it():
    """Today's reading strong on 3 long prompts, the other 0.2 higher on 27 short ones:
    pooled over tokens today's leads, per prompt the other does, and per prompt is how
    both are picked and judged: a change, decided (the pooled lead once fell through to
    an undecided verdict that no number of prompts could settle)."""
    today = [3.0] * 3 + [2.3 + 0.01 * (p % 3) for p in range(27)]
    other = [2.7] * 3 + [2.5 + 0.01 * (p % 5) for p in range(27)]
    positions = [2000] * 3 + [20] * 27
    pooled = {name: 1 + sum((v - 1) * w for v, w in zip(values, positions)) / sum(positions)
              for name, values in (("today", today), ("other", other))}
    assert pooled["today"] > pooled["other"]
    decision = decide(_rows([pooled["today"], pooled["other"]]), current=0,
                      per_prompt={0: today, 1: other})
    assert decision["status"] == "change" and decision["row"] == 1, decision["why"]
    assert decision["difference"]["status"] == "higher"


def test_a_lead_picked_among_readings_is_held_to_their_shared_level():
    from vllm_kimi_eagle.tools.calibrate.decision import among

    assert among(0.95, 2) == pytest.approx(0.95)
    assert among(0.95, 5) == pytest.approx(0.9875)
    today = [2.3 + 0.02 * (p % 4) for p in range(12)]
    other = [v + 0.05 + 0.04 * ((p % 3) - 1) for p, v in enumerate(today)]
    pair = {0: today, 1: other}
    assert decide(_rows([2.3, 2.35]), 0, pair)["status"] == "change"
    crowd = {**pair, **{i: [v - 0.5 for v in today] for i in range(2, 12)}}
    crowded = decide(_rows([2.3, 2.35] + [1.8] * 10), 0, crowd)
    assert crowded["difference"]["level"] == pytest.approx(1 - 0.05 / 11)
    assert "99.5455% interval" in crowded["why"]


def test_too_few_prompts_never_decide():
    positions = torch.full((4,), 50.0)
    steady = {0: torch.full((4, 3), 30.0), 1: torch.full((4, 3), 10.0)}
    steady[0][0] += 1.0
    per_prompt = {i: scoring.per_prompt(m, positions) for i, m in steady.items()}
    decision = decide(_rows([2.8, 1.6]), current=1, per_prompt=per_prompt)
    assert decision["status"] == "undecided" and "no verdict from 4 requests" in decision["why"]


def test_undecided_says_whether_more_prompts_could_decide():
    """More prompts are asked for only where they could decide: readings equal on every
    prompt (a rope base on a NoPE draft) or cancelling out stop the rounds, saying so."""
    same = decide(_rows([2.5, 2.5]), 0, {0: [2.5, 2.4] * 6, 1: [2.5, 2.4] * 6})
    assert same["status"] == "undecided" and same["final"] is True
    assert "no number of prompts would decide it" in same["why"]
    assert "--max-prompts" not in same["why"]
    cancel = decide(_rows([2.5, 2.5]), 0, {0: [2.6, 2.4] * 6, 1: [2.4, 2.6] * 6})
    assert cancel["final"] is True and "cancel out" in cancel["why"]
    noisy = decide(_rows([2.52, 2.5]), 0,
                   {0: [2.6, 2.45, 2.5] * 4, 1: [2.5, 2.5, 2.5] * 4})
    assert noisy["status"] == "undecided" and noisy["final"] is False
    needed = noisy["difference"]["pairs_needed"]
    assert needed > 12 and f"About {needed} prompts (--max-prompts" in noisy["why"]


def test_looking_after_every_round_is_paid_for():
    from vllm_kimi_eagle.tools.calibrate.cli import round_sizes
    from vllm_kimi_eagle.tools.calibrate.decision import per_look

    assert round_sizes(16, 256) == [16, 32, 64, 128, 256]
    assert round_sizes(16, 8) == [8] and round_sizes(24, 40) == [24, 40]
    assert per_look(1) == pytest.approx(0.95) and per_look(5) == pytest.approx(0.99)


def test_the_tiny_target_is_known_also_through_links(tmp_path):
    """The tiny defaults apply to the tiny target named by folder or reached through a
    Hugging Face cache snapshot (links to its files), and to nothing else."""
    models = tmp_path / "tiny"
    (models / "target").mkdir(parents=True)
    (models / "BUILT.json").write_text("{}")
    (models / "target" / "config.json").write_text("{}")
    snapshot = tmp_path / "hf" / "models--org--target" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(models / "target" / "config.json")
    other = tmp_path / "other" / "model"
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}")
    assert is_tiny_target(str(models / "target")) and is_tiny_target(str(snapshot))
    assert not is_tiny_target(str(other))



@pytest.mark.parametrize("rope", [
    {"rope_scaling": {"type": "yarn", "factor": 32.0, "rope_theta": 50000.0}},
    {"rope_parameters": {"rope_type": "default", "rope_theta": 50000.0}},
    {"rope_scaling": {"type": "yarn", "factor": 32.0}, "rope_theta": 50000.0},
], ids=["base-in-rope_scaling", "base-in-rope_parameters", "base-at-the-top"])
def test_the_written_copy_serves_the_calibrated_base_wherever_the_config_wrote_it(tmp_path, rope):
    from vllm_kimi_eagle.draft.draft_config import read_draft_config
    from vllm_kimi_eagle.tools.calibrate.report import write_copy

    draft = tmp_path / "draft"
    draft.mkdir()
    config = {"hidden_size": 256, "max_position_embeddings": 2048, **rope}
    (draft / "config.json").write_text(json.dumps(config))
    (draft / "model.safetensors").write_bytes(b"x")
    write_copy(str(draft), config, {"config.json": {"rope_theta": 10000.0}},
               str(tmp_path / "copy"))
    record = read_draft_config(str(tmp_path / "copy"))
    assert record.config_rope_theta == 10000.0 and record.rope_disagreements == []


def _change():
    from vllm_kimi_eagle.tools.calibrate.decision import CHANGE

    return {"status": CHANGE, "row": 1, "beats_current": True, "difference": None,
            "why": "output-of is higher than input-of"}


def _served_rows(ours: list[float] | None, today: list[float] | None, ours_mean: float,
                 today_mean: float) -> list[dict]:
    def online(values, mean):
        return {"acceptance_length": mean, "acceptance_by_position": [], "drafts": 100,
                "per_prompt": values}

    return [{"reading": "input-of", "online": online(today, today_mean)},
            {"reading": "output-of", "online": online(ours, ours_mean)}]


# Served figures where the paired per-prompt mean and the pooled counters disagree: the
# recommended reading trails on most prompts but leads on the long ones (pooled).
OURS = [2.0, 2.0, 2.0, 3.4] * 6
TODAY = [2.1, 2.1, 2.1, 3.2] * 6


@pytest.mark.parametrize("per_request", [True, False], ids=["0.29-on", "0.28"])
def test_served_the_same_rule_decides_on_every_release(per_request):
    """The change stands unless vLLM's pooled counters give today's reading the higher
    acceptance; vLLM's per-request figures (0.29 on) are reported and decide nothing, so
    the same served data gives the same verdict with and without them."""
    from vllm_kimi_eagle.tools.calibrate.decision import CHANGE, UNDECIDED, recheck_online

    figures = (OURS, TODAY) if per_request else (None, None)
    # Pooled, the recommended reading leads (its long prompts weigh more): it stands,
    # though prompt by prompt it trails.
    kept = recheck_online(_change(), _served_rows(*figures, 2.61, 2.55), current=0)
    assert kept["status"] == CHANGE and "today's 2.55" in kept["why"]
    if per_request:
        assert kept["online_difference"]["mean"] < 0
    else:
        assert kept["online_difference"] is None
    # Pooled, today's reading leads: withdrawn, whatever the per-request figures say.
    withdrawn = recheck_online(_change(), _served_rows(*figures, 2.50, 2.55), current=0)
    assert withdrawn["status"] == UNDECIDED and withdrawn["row"] == 0
    assert "today's reading stays" in withdrawn["why"]
