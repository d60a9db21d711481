"""Per-request acceptance (tools/figures/request_metrics.py) and the paired statistics
(tools/figures/paired.py): what a response carries, how requests add up to the server's
counters, the distribution, and the verdicts a user reads."""

from __future__ import annotations

import random

import pytest
from packaging.version import Version

from vllm_kimi_eagle.tools.figures import paired, request_metrics, spec_metrics
from vllm_kimi_eagle.tools.figures.request_metrics import RequestAcceptance

RESPONSE = {"choices": [{"text": "x"}], "metrics": {"speculative_decoding": {
    "mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5,
    "acceptance_histogram": [1, 1, 1, 1], "num_spec_steps": 4,
    "num_accepted_draft_tokens": 6, "num_draft_tokens": 12, "num_spec_tokens": 3}}}


def test_a_response_gives_its_histogram_and_the_figures_vllm_derives():
    found = request_metrics.from_response(RESPONSE)
    assert found == RequestAcceptance((1, 1, 1, 1), 12)
    figures = RESPONSE["metrics"]["speculative_decoding"]
    assert found.steps == figures["num_spec_steps"]
    assert found.accepted == figures["num_accepted_draft_tokens"]
    assert found.acceptance_length == figures["mean_acceptance_length"]
    # position i is accepted by the steps that accepted more than i tokens
    assert found.accepted_per_position() == [3, 2, 1]


@pytest.mark.parametrize("body", [{"choices": []}, {"metrics": None},
                                  {"metrics": {"speculative_decoding": None}}])
def test_a_response_without_figures_gives_none(body):
    assert request_metrics.from_response(body) is None


def test_requests_add_up_as_the_servers_counters_count():
    requests = [RequestAcceptance((1, 1, 1, 1), 12), RequestAcceptance((0, 2, 0, 3), 15),
                RequestAcceptance((0, 0, 0, 0), 0)]  # a request that never drafted
    total = request_metrics.counters(requests)
    assert (total.drafts, total.draft_tokens, total.accepted) == (9, 27, 6 + 11)
    assert total.accepted_per_pos == {0: 3 + 5, 1: 2 + 3, 2: 1 + 3}
    assert total.summary()["acceptance_length"] == round(1 + 17 / 9, 4)
    # The server's counters over the same requests, as /metrics writes them:
    text = "\n".join([
        'vllm:spec_decode_num_drafts_total{engine="0"} 9.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 27.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 17.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 8.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 5.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 4.0', ""])
    served = spec_metrics.spec_counters(spec_metrics.Scrape.parse(text)).summary()
    assert request_metrics.adds_up(requests, served)
    assert not request_metrics.adds_up(requests[1:], served)
    kept = [RequestAcceptance.from_dict(r.as_dict()) for r in requests]  # as reports keep them
    assert kept == requests and requests[1].as_dict()["acceptance_length"] == 1 + 11 / 5


def test_the_distribution_has_percentiles_and_a_histogram_of_every_request():
    requests = [RequestAcceptance((4 - j, 0, 0, j), 12) for j in range(5)]  # 1.0 .. 4.0
    d = request_metrics.distribution(requests, k=3)
    assert d["requests"] == 5 and d["mean"] == 2.5
    assert (d["p10"], d["p50"], d["p90"]) == (1.3, 2.5, 3.7)
    assert d["histogram"]["counts"] == [1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1]
    assert sum(d["histogram"]["counts"]) == d["requests"]
    assert request_metrics.distribution([RequestAcceptance((0, 0), 0)], k=1) == {"requests": 0}


def test_started_servers_ask_for_the_figures_only_with_a_draft_and_a_release_that_has_them():
    assert request_metrics.server_args(True, Version("0.32.0")) == [
        "--per-request-spec-decode-metrics", "summary"]
    assert request_metrics.server_args(False, Version("0.32.0")) == []  # vLLM refuses it
    assert request_metrics.server_args(True, Version("0.28.0")) == []


def test_a_clear_difference_is_named_with_its_intervals_two_ends():
    rng = random.Random(1)
    better = [2.8 + rng.gauss(0, 0.2) for _ in range(16)]
    worse = [b - 0.5 + rng.gauss(0, 0.1) for b in better]
    d = paired.paired_difference(better, worse)
    assert d["status"] == paired.HIGHER
    assert 0 < d["low"] < d["mean"] < d["high"] and d["mean"] == pytest.approx(0.5, abs=0.1)
    line = paired.verdict("A", "B", d, "acceptance length")
    assert line.startswith("A is higher than B in acceptance length by 0.")
    assert f"(95% interval {d['low']:.3f} to {d['high']:.3f}, 16 requests paired)" in line
    flipped = paired.verdict("B", "A", paired.paired_difference(worse, better), "x")
    assert flipped.startswith("A is higher than B in x") and "±" not in flipped
    assert f"95% interval {d['low']:.3f} to {d['high']:.3f}" in flipped


def test_a_skewed_interval_is_written_as_its_ends_not_plus_minus_half():
    d = {"pairs": 40, "mean": 0.26, "low": 0.01, "high": 0.634, "level": 0.95,
         "status": paired.HIGHER, "pairs_needed": None, "min_pairs": paired.MIN_PAIRS}
    assert paired.verdict("A", "B", d, "x") == (
        "A is higher than B in x by 0.260 (95% interval 0.010 to 0.634, 40 requests paired)")


def test_pairing_sees_what_two_unpaired_means_would_not():
    """Requests differ far more from each other than the settings do: the per-request
    difference is small but steady, so pairing tells the settings apart."""
    rng = random.Random(2)
    base = [rng.uniform(1.5, 3.5) for _ in range(24)]
    a = [x + 0.06 + rng.gauss(0, 0.02) for x in base]
    assert paired.paired_difference(a, base)["status"] == paired.HIGHER


@pytest.mark.parametrize("n", [1, 2, 3, paired.MIN_PAIRS - 1])
def test_no_verdict_from_fewer_pairs_than_the_minimum(n):
    d = paired.paired_difference([2.5] * n, [2.0] * n)
    assert d["status"] == paired.TOO_FEW and d["low"] is None
    line = paired.verdict("A", "B", d, "acceptance length")
    assert f"no verdict from {n} request" in line
    assert f"at least {paired.MIN_PAIRS} are needed" in line
    assert "higher" not in line


def test_float_noise_is_not_a_difference():
    """[2.3, 1.7, 2.0] against 2.0 three times: the mean is -4e-17 in floats, zero here."""
    a, b = [2.3, 1.7, 2.0] * 4, [2.0] * 12
    d = paired.paired_difference(a, b)
    assert d["mean"] == 0.0 and d["status"] == paired.UNDECIDED and d["pairs_needed"] is None
    line = paired.verdict("A", "B", d, "acceptance length")
    assert "the requests' differences cancel" in line and "about" not in line
    same = paired.paired_difference([2.0, 2.5] * 5, [2.0 + 1e-12, 2.5] * 5)
    assert same["status"] == paired.SAME
    assert "gave the same acceptance length on every one of 10 requests" in paired.verdict(
        "A", "B", same, "acceptance length")


def test_an_undecided_difference_asks_for_more_requests_than_it_had():
    """The count is for the stated power at the difference seen: never fewer than the
    requests that could not tell, and never absurd."""
    rng = random.Random(3)
    for trial in range(200):
        a = [rng.gauss(2.5, 0.5) for _ in range(20)]
        b = [x + rng.gauss(0.05, 0.5) for x in a]
        d = paired.paired_difference(a, b)
        if d["status"] != paired.UNDECIDED:
            continue
        assert d["pairs_needed"] is None or 20 < d["pairs_needed"] <= paired.MAX_NEEDED
        if d["pairs_needed"]:
            line = paired.verdict("A", "B", d, "acceptance length")
            assert line.startswith("A and B are not distinguishable in acceptance length "
                                   "with 20 requests (difference ")
            assert f"about {d['pairs_needed']} requests would find" in line
    # A mean difference of 0.0001 at a spread of 0.5: no practical count, said so.
    tiny = paired.paired_difference([2.5001, 1.5001] * 15, [2.0] * 30)
    assert tiny["status"] == paired.UNDECIDED and tiny["pairs_needed"] is None
    assert "too small to tell apart with any practical number of requests" in \
        paired.verdict("A", "B", tiny, "x")


def test_non_finite_figures_are_refused_by_request():
    with pytest.raises(paired.FiguresError, match=r"request 'r7'.*nan, not a finite number"):
        paired.paired_difference([2.0, float("nan")], [2.0, 2.0], ids=["r6", "r7"])
    with pytest.raises(paired.FiguresError, match="second side is inf"):
        paired.paired_difference([2.0], [float("inf")])


def test_unpaired_figures_are_refused():
    with pytest.raises(ValueError, match="the same requests on both sides"):
        paired.paired_difference([1.0, 2.0], [1.0])


def test_soak_counts_the_requests_that_reported_their_acceptance():
    from vllm_kimi_eagle.tools.soak import report
    from vllm_kimi_eagle.tools.soak.client import OK, Outcome

    outcomes = {1: Outcome(1, OK, acceptance={"histogram": [0, 1, 1, 0], "draft_tokens": 6}),
                2: Outcome(2, OK), 3: Outcome(3, OK, acceptance={"histogram": [1, 0, 0, 1],
                                                                   "draft_tokens": 6})}
    figures = report.per_request(outcomes, k=3)
    assert (figures["reported"], figures["of"], figures["requests"]) == (2, 3, 2)
    assert figures["mean"] == 2.5
    assert "2 of 3 requests" in report.format_per_request(figures)
    assert "none of the draft server's 1 requests" in report.format_per_request(
        report.per_request({2: Outcome(2, OK)}, k=3))
