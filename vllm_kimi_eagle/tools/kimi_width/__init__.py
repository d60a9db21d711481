"""``vllm-kimi-eagle kimi-width``: the draft classes at Kimi's own width, measured.

Builds (once, about 21 GB on disk) the Kimi-width target and drafts of
``fixtures/kimi_width.py``, then serves each draft with the plugin's class and with vLLM's
class, and the target without a draft, at each tensor-parallel size asked for, one engine
at a time in bfloat16. For each engine: start-up time, the target's and the draft's weight
loading time, the worker's peak memory; greedy tokens against the ones the models were
built to give; the spec-decode counters. Then, per draft, the plugin's class against
vLLM's: tokens, counters, peak memory (at most 1.02x), weight loading (at most 1.1x). And
what the plugin itself costs before a weight loads: ``register()``, the
speculative-config hook, the checkpoint's multi-shard headers, ``inspect``.

It writes ``OUT/report.md`` and ``OUT/report.json`` (every engine's log under
``OUT/logs/``) and exits 1 when a check fails. It checks for the disk and memory it needs
before building or starting anything.
"""
