"""``vllm-kimi-eagle soak``: serve with the draft and without it, side by side, and drive both
the way a serving node is driven; then say whether anything broke.

Two vLLM OpenAI servers on 127.0.0.1, the same target, one with the EAGLE3 draft and one
without, both with a small KV cache (``--kv-blocks``). A seeded, bounded plan of requests
(``traffic.py``: greedy and sampled, ``n`` > 1, logprobs, stop strings, chat and
completions, streamed and not, clients that disconnect mid-stream, shared prefixes, prompts
that fill the context, requests the server must refuse) goes to both in windows, each a
burst past the KV cache, through the real ``openai`` client (``client.py``, ``runner.py``).
The first windows are greedy only. Then ``vllm bench serve`` (vLLM's own load generator)
measures each server once more.

It asserts (``checks.py``): both servers stay up; every request completes, is cancelled by
its client as planned, or gets the HTTP error it must get, naming the field; every greedy
answer of the draft server is the no-draft server's, token for token; drafts are accepted
in every window, also after preemptions; acceptance in the windows with sampled requests
is within ``--acceptance-tolerance`` of the greedy-only windows'; vLLM preempted and
clients cancelled; nothing is left running after a window; the draft server's resident
memory grows less than ``--rss-limit`` from the first third of the run to the last, after
the greedy-only windows that warm it up (the server without a draft is reported beside it
as the control). Exit 0 when every check passes, 1 when one fails, 2 when the soak could
not run.
"""
