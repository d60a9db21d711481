"""``vllm-kimi-eagle kimi-width``: the draft classes at Kimi's own width, measured.

Lifts (once, 18 GB on disk) the trained tiny target and three of its drafts to Kimi's
width (``fixtures/lifted.py``), with a negative control of each part a draft class reads
(``fixtures/controls.py``); then serves each draft with the plugin's class and with
vLLM's, each control, and the target without a draft, at each tensor-parallel size asked
for, one engine at a time (bfloat16; float32 at ``--width small``). For each engine:
start-up time, the draft's weight loading time, the worker's peak memory, the greedy
tokens and the spec-decode counters; its acceptance against what the reference models
give over its own tokens (``replay.py``). Every control must lose acceptance; per draft,
the plugin's class against vLLM's: tokens and peak memory (at most 1.02x); over the run,
weight loading (at most 1.1x). ``--construction torus`` serves the untrained models of
``fixtures/kimi_width.py`` instead (every token known, every draft token accepted) and
measures what the plugin costs before a weight loads.

It writes ``OUT/report.md`` and ``OUT/report.json`` (every engine's log under
``OUT/logs/``) and exits 1 when a check fails. It checks for the disk and memory it needs
before building or starting anything.
"""
