"""``vllm-kimi-eagle compare``: speculative settings compared on the same traffic.

Serves one target with each setting in turn (a draft, k, a layer-id reading, NoPE on or
off, ...) and, first, without a draft; sends every server the same requests; reads each
response's own acceptance (vLLM's per-request metrics, ``request_metrics``). It reports
per setting the distribution of per-request acceptance length, per-position acceptance
and output tokens/s; for every pair of settings the paired per-request difference with a
bootstrap 95% interval and a verdict; with ``--raw``, the same text sent without the chat
template beside it (the template's cost). Greedy answers of every setting are checked
against the server without a draft. Writes ``report.json`` (every request), ``report.md``
and ``report.png``.
"""
