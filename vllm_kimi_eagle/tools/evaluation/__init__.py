"""``vllm-kimi-eagle eval``: lm-eval accuracy, acceptance and speedup, with and without the draft.

Runs one lm-eval task against vLLM's OpenAI server twice, without speculation and with
it (servers started here from model paths, or given as URLs), and reports: accuracy both
ways (lm-eval's metrics) and per-sample agreement of the generated answers; acceptance
length and per-position acceptance; output tokens/s and time per output token both
ways, and the speedup. Writes ``report.json``, ``report.md`` and ``report.png``.

How the speed is measured, the same way in both runs: once lm-eval has built the
task's requests, one warm-up request (the task's first, with the same settings) goes to
the server; then ``/metrics`` is scraped, every request of the task is sent (the timed
window: generation requests only, none of lm-eval's setup), and ``/metrics`` is scraped
again. ``speedup_generation`` is the ratio of output tokens/s over that window; the
server's own time per output token (``vllm:request_decode_time_seconds`` over the
tokens after each request's first) gives ``speedup_time_per_output_token``, an
independent figure. When the two are more than 25% apart the report says so and prints
no headline speedup.

Only tasks that generate run the draft: a task whose lm-eval ``output_type`` is not
``generate_until`` (multiple choice, log-likelihood) is refused, with the reason.
Offline, ``--task kimi_eagle_gpqa_tiny`` is a small GPQA-format task of our own, asked
and scored as lm-eval's GPQA chain-of-thought tasks (``eval/tasks``, always on lm-eval's
include path here; ``--include-path`` adds folders of your own tasks).
"""
