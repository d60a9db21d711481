"""The tools a person runs around the plugin (``vllm-kimi-eagle ...``); never imported
by vLLM. Each answers one question: ``inspect_draft`` (what will vLLM do with this
draft?), ``evaluation`` (accuracy and acceptance with and without the draft),
``bench_e2e`` (which k at which load?), ``bench_sampler`` (what does the greedy shortcut
save?), ``demo`` (the tiny Kimi demo). ``vllm_server`` starts vLLM's OpenAI server for
them, ``spec_metrics`` reads its counters.
"""
