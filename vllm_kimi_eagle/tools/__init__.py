"""The tools a person runs around the plugin (``vllm-kimi-eagle ...``); never imported
by vLLM. Each answers one question: ``inspect_draft`` (what will vLLM do with this
draft?), ``calibrate`` (which layer reading was it trained on?), ``evaluation``
(accuracy and acceptance with and without the draft), ``bench_e2e`` (which k at which
load?), ``gpu_check`` (does it work on my GPU?), ``soak`` (does it stay right under
serving traffic?), ``bench_sampler`` (what does the greedy shortcut save?), ``demo``
(the tiny Kimi demo). Their shared helpers in three groups: ``engines`` (vLLM's
server, an engine in a process of its own), ``figures`` (vLLM's counters, statistics,
charts, progress lines) and ``models`` (where a model is, a target config's fields).
"""
