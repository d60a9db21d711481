"""vllm-kimi-eagle compare without a server: the traffic it reads, the settings it
parses, and what it concludes from answers (analysis.py). An lm-eval task's prompts:
tests/integration/test_lm_eval_tasks.py; real servers: tests/e2e/test_compare_e2e.py."""

from __future__ import annotations

import json

import pytest

from vllm_kimi_eagle.tools.compare import analysis, run, traffic
from vllm_kimi_eagle.tools.compare.cli import parse_args


def _write(tmp_path, lines) -> str:
    path = tmp_path / "traffic.jsonl"
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines))
    return str(path)


def test_each_form_of_request_is_read_as_the_client_sends_it(tmp_path):
    path = _write(tmp_path, [
        {"messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": "count up from 3"}], "temperature": 0.7,
         "max_completion_tokens": 20, "stream": True},
        {"prompt": "list capitals"},
        "",
        {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "hi"},
                           {"from": "gpt", "value": "hello"}]},
    ])
    chat, completion, sharegpt = traffic.read_jsonl(path)
    assert chat.sampling == {"temperature": 0.7, "max_tokens": 20} and not chat.greedy
    assert chat.raw_text() == "be brief\ncount up from 3"
    assert completion.prompt == "list capitals" and completion.greedy
    assert sharegpt.messages == ({"role": "user", "content": "hi"},)
    assert chat.id.endswith("traffic.jsonl:1") and sharegpt.id.endswith(":4")
    assert traffic.read_jsonl(path, limit=2) == [chat, completion]


def test_the_endpoint_and_body_of_each_variant():
    chat = traffic.Request("a", messages=({"role": "user", "content": "hi"},),
                           sampling={"max_tokens": 5})
    path, body = traffic.body(chat, "m", raw=False, max_tokens=64)
    assert path == "/v1/chat/completions" and body["messages"] == [{"role": "user",
                                                                    "content": "hi"}]
    assert body["max_tokens"] == 5 and body["temperature"] == 0.0  # the line's own wins
    path, body = traffic.body(chat, "m", raw=True, max_tokens=64)
    assert path == "/v1/completions" and body["prompt"] == "hi" and "messages" not in body


@pytest.mark.parametrize("line, found", [
    ('{"messages": []}', "no request in keys ['messages']"),
    ('{"input": "x"}', "no request in keys ['input']"),
    ('[1, 2]', "a request is a JSON object, found list"),
    ('{"prompt": "x"', "not JSON"),
])
def test_a_bad_line_names_its_file_line_and_what_was_expected(tmp_path, line, found):
    path = _write(tmp_path, ['{"prompt": "fine"}', line])
    with pytest.raises(traffic.TrafficError) as err:
        traffic.read_jsonl(path)
    assert f"{path}:2: " in str(err.value) and found in str(err.value)


def test_settings_from_drafts_configs_and_environments():
    chosen = run.settings(
        ['nope={"method": "eagle3", "model": "/m/k3", "num_speculative_tokens": 2}'],
        ["/m/draft", "/m/draft-eagle3.1/"], 3,
        ["draft:VLLM_KIMI_EAGLE_LAYER_IDS=output-of"])
    assert [s.name for s in chosen] == ["draft", "draft-eagle3.1", "nope"]
    assert chosen[0].speculative == {"method": "eagle3", "model": "/m/draft",
                                     "num_speculative_tokens": 3}
    assert chosen[0].env == {"VLLM_KIMI_EAGLE_LAYER_IDS": "output-of"}
    assert chosen[2].speculative["num_speculative_tokens"] == 2 and chosen[2].env == {}
    assert run.settings(["off=none"], [], 3, [])[0].speculative is None


@pytest.mark.parametrize("configs, drafts, envs, message", [
    ([], ["/a/draft", "/b/draft"], [], "must be unique .*: draft"),
    (["no-draft=none"], [], [], "must be unique and not 'no-draft'"),
    (["x"], [], [], "expected NAME=JSON"),
    (["x={bad"], [], [], "--config x: not JSON"),
    (["x=[1]"], [], [], "a JSON object, found list"),
    ([], ["/a/d"], ["e:V=1"], "--env names no setting: e"),
    ([], ["/a/d"], ["d=V"], "expected NAME:VAR=VALUE"),
    ([], [], [], "nothing to compare"),
])
def test_settings_refused_say_why(configs, drafts, envs, message):
    with pytest.raises(ValueError, match=message):
        run.settings(configs, drafts, 3, envs)


def test_the_command_line_needs_traffic_and_refuses_bad_settings(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--target", "t", "--draft", "d"])
    assert "one of the arguments --prompts --lm-eval-task --tiny-prompts is required" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--target", "t", "--tiny-prompts", "4"])
    assert "nothing to compare" in capsys.readouterr().err


SPEC = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3}


def _answers(texts, histograms, greedy=True):
    return {"requests": [
        {"id": str(i), "greedy": greedy, "text": t, "output_tokens": 4,
         "acceptance": None if h is None else {
             "histogram": h, "draft_tokens": 3 * sum(h),
             "acceptance_length": 1 + sum(j * c for j, c in enumerate(h)) / sum(h)}}
        for i, (t, h) in enumerate(zip(texts, histograms))],
        "tokens_per_s": 10.0, "window": {}}


def test_the_analysis_pairs_requests_and_checks_greedy_answers():
    texts = list("abcdefghijkl")
    none = {"variants": {"sent": _answers(texts, [None] * 12)}}
    good = {"speculative_config": SPEC,
            "variants": {"sent": _answers(texts, [[0, 0, 1, 3], [0, 1, 0, 3],
                                                  [0, 0, 0, 4]] * 4)}}
    weak = {"speculative_config": SPEC,
            "variants": {"sent": _answers(["a", "x"] + texts[2:], [[2, 2, 0, 0], [3, 1, 0, 0],
                                                                   [1, 3, 0, 0]] * 4)}}
    runs = {run.NO_DRAFT: none, "good": good, "weak": weak}
    (pair,) = analysis.comparisons(runs)
    assert pair["settings"] == ["good", "weak"] and pair["difference"]["low"] > 0
    assert pair["verdict"].startswith("good is higher than weak")
    assert "12 requests paired" in pair["verdict"]
    greedy = analysis.greedy_agreement(runs)
    assert greedy == {"good/sent": {"compared": 12, "differ": []},
                      "weak/sent": {"compared": 12, "differ": ["1"]}}
    assert analysis.speedups(runs) == {
        "good/sent": {"median": 1.0, "low": 1.0, "high": 1.0, "rounds": 1},
        "weak/sent": {"median": 1.0, "low": 1.0, "high": 1.0, "rounds": 1}}
    # One window each, at different times: never a speed ranking.
    (line,) = analysis.speed_verdicts(runs)
    assert "one window each, at different times: not ranked" in line


def _speed_runs(none, good, weak):
    def variant(speeds):
        return {"requests": [], "window": {}, "tokens_per_s": speeds[0],
                "round_tokens_per_s": speeds}
    return {run.NO_DRAFT: {"speculative_config": None, "variants": {"sent": variant(none)}},
            "good": {"speculative_config": SPEC, "variants": {"sent": variant(good)}},
            "weak": {"speculative_config": SPEC, "variants": {"sent": variant(weak)}}}


def test_speed_is_ranked_only_where_every_round_tells_the_settings_apart():
    """Per-round speedups over the no-draft server of the same round: a ranking only where
    their spreads do not overlap (a busy machine moves every server's round alike)."""
    apart = _speed_runs([100, 50, 100], [150, 76, 152], [120, 59, 118])
    (line,) = analysis.speed_verdicts(apart)
    assert line.startswith("good is faster than weak: speedup 1.52 against 1.18")
    assert analysis.speedups(apart)["good/sent"] == {"median": 1.52, "low": 1.5, "high": 1.52,
                                                      "rounds": 3}
    overlapping = _speed_runs([100, 100, 100], [150, 120, 130], [125, 140, 118])
    (line,) = analysis.speed_verdicts(overlapping)
    assert "overlap: the spread leaves the ranking open" in line


def test_three_requests_give_no_verdict():
    """A "95%" win from three requests is no verdict: the minimum is said instead."""
    texts = ["a", "b", "c"]
    runs = {run.NO_DRAFT: {"variants": {"sent": _answers(texts, [None] * 3)}},
            "good": {"speculative_config": SPEC,
                     "variants": {"sent": _answers(texts, [[0, 0, 1, 3], [0, 1, 1, 2],
                                                           [0, 0, 2, 2]])}},
            "weak": {"speculative_config": SPEC,
                     "variants": {"sent": _answers(texts, [[2, 2, 0, 0]] * 3)}}}
    (pair,) = analysis.comparisons(runs)
    assert pair["difference"]["status"] == "too-few"
    assert "no verdict from 3 requests" in pair["verdict"]


def test_per_request_sums_are_checked_against_the_window():
    """Against the server's counters as /metrics writes them (parsed as compare parses a
    scrape), not against the sums' own summary: an error in the summing fails here."""
    from vllm_kimi_eagle.tools.figures import spec_metrics

    answers = _answers(["a", "b"], [[0, 1, 1, 1], [1, 0, 0, 1]])
    # 5 steps, 15 draft tokens; accepted 1+2+3 and 0+3: 9; positions 3+1, 2+1, 1+1.
    text = "\n".join([
        'vllm:spec_decode_num_drafts_total{engine="0"} 5.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 15.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 9.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 4.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 3.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 2.0', ""])
    window = spec_metrics.spec_counters(spec_metrics.Scrape.parse(text)).summary()
    assert analysis.summary({**answers, "window": window}, k=3)["consistent"]
    off = dict(window, accepted_tokens=window["accepted_tokens"] + 1)
    assert not analysis.summary({**answers, "window": off}, k=3)["consistent"]
    assert analysis.summary(_answers(["a"], [None]), k=3)["per_request"] is False
    # Some requests without figures: the others still count, and no check is claimed.
    partial = _answers(["a", "b", "c"], [[0, 1, 1, 1], None, [1, 0, 0, 1]])
    found = analysis.summary({**partial, "window": window}, k=3)
    assert found["distribution"]["requests"] == 2 and found["missing"] == 1
    assert found["consistent"] is None and "1 of 3 requests carried no" in found["missing_note"]


def test_acceptance_by_prompt_length_is_bucketed_by_the_servers_count():
    """Each bucket's requests, their mean per-request length and the length pooled as
    vLLM's counters pool it; requests without figures or prompt counts left out."""
    from vllm_kimi_eagle.tools.compare import analysis

    def request(prompt, histogram):
        return {"id": str(prompt), "prompt_tokens": prompt,
                "acceptance": {"histogram": histogram, "draft_tokens": 3 * sum(histogram),
                               "acceptance_length": None}}

    variant = {"requests": [request(100, [0, 0, 0, 4]), request(400, [4, 0, 0, 0]),
                            request(3000, [1, 1, 0, 0]), {"id": "x", "error": "timeout"},
                            {"id": "y", "prompt_tokens": 50, "acceptance": None}]}
    assert analysis.by_prompt_length(variant) == [
        {"prompt_tokens": "0-512", "requests": 2, "mean": 2.5, "pooled": 2.5},
        {"prompt_tokens": "2049-8192", "requests": 1, "mean": 1.5, "pooled": 1.5}]
    assert analysis.bucket_name(512) == "0-512" and analysis.bucket_name(40000) == "32769+"


def test_servers_already_running_are_settings_of_their_own():
    from vllm_kimi_eagle.tools.compare import cli, run

    args = cli.parse_args(["--url", "k3=http://127.0.0.1:8001", "--url",
                           "no-draft=http://127.0.0.1:8000", "--tiny-prompts", "4"])
    assert [(s.name, s.url, s.speculative is None) for s in args.settings] == [
        ("k3", "http://127.0.0.1:8001", False), ("no-draft", "http://127.0.0.1:8000", True)]
    for bad in (["--url", "k3=localhost:8000"], ["--url", "no-draft=http://h:1"]):
        with pytest.raises(ValueError):
            run.running(bad[1:])
    with pytest.raises(SystemExit):
        cli.parse_args(["--url", "k3=http://h:1", "--target", "t", "--tiny-prompts", "4"])
    with pytest.raises(SystemExit):
        cli.parse_args(["--tiny-prompts", "4"])
