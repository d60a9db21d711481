"""One reader of vLLM's /metrics text: engines summed, scrapes subtracted."""

from __future__ import annotations

from vllm_kimi_eagle.tools.figures import spec_metrics
from vllm_kimi_eagle.tools.figures.spec_metrics import (
    Scrape,
    spec_counters,
    time_per_output_token_ms,
)


METRICS_TEXT = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_drafts_total{{engine="1",model_name="m"}} 10.0
vllm:spec_decode_num_drafts_created{{engine="0",model_name="m"}} 1.7e9
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="0"}} {pos0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="1"}} 2.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {tokens}
# TYPE vllm:request_decode_time_seconds histogram
vllm:request_decode_time_seconds_bucket{{engine="0",le="+Inf"}} {requests}
vllm:request_decode_time_seconds_sum{{engine="0"}} {decode}
vllm:request_decode_time_seconds_count{{engine="0"}} {requests}
"""


def test_one_metrics_parser_sums_engines_and_subtracts_scrapes():
    before = Scrape.parse(METRICS_TEXT.format(drafts=5.0, pos0=4.0, tokens=100.0,
                                              requests=2.0, decode=1.0))
    after = Scrape.parse(METRICS_TEXT.format(drafts=25.0, pos0=20.0, tokens=302.0,
                                             requests=4.0, decode=3.0))
    assert spec_counters(after).drafts == 35.0  # engines 0 and 1
    window = after - before
    counters = spec_counters(window)
    assert counters.drafts == 20.0 and counters.accepted_per_pos == {0: 16.0, 1: 0.0}
    # 2 requests, 202 tokens of which 2 came from prefills: 2 s / 200 tokens
    assert time_per_output_token_ms(window) == 10.0


def test_batch_size_from_polled_running_requests():
    text = ('# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
            'vllm:num_requests_running_other 9.0\n')
    assert spec_metrics.running_requests(text) == 3.0
    assert spec_metrics.running_requests("vllm:other 1.0\n") is None
    # Polls between requests (nothing running) do not count: the batch while busy.
    assert spec_metrics.mean_batch([0.0, 1.0, 1.0, None, 0.0, 2.0]) == 1.333
    assert spec_metrics.mean_batch([0.0, None]) is None


def test_draft_tokens_per_step_from_the_counters():
    from vllm_kimi_eagle.tools.figures.spec_metrics import (
        GENERATION_TOKENS,
        Scrape,
        draft_tokens_per_step,
    )

    # 2 requests x 10 tokens: 1 from each prefill, then 6 decode steps drafting 3 tokens
    # each and accepting 2 of them on average (6 x 3 = 18 drafted, 12 accepted, 2 + 6 + 12 = 20).
    window = Scrape({GENERATION_TOKENS: {(): 20.0},
                     "vllm:spec_decode_num_draft_tokens_total": {(): 18.0},
                     "vllm:spec_decode_num_accepted_tokens_total": {(): 12.0},
                     "vllm:spec_decode_num_drafts_total": {(): 6.0}})
    assert draft_tokens_per_step(window, requests=2) == 3.0
    assert draft_tokens_per_step(Scrape({GENERATION_TOKENS: {(): 2.0}}), requests=2) is None
