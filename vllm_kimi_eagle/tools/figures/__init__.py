"""Figures and statistics the tools report: vLLM's speculative counters
(``spec_metrics``) and per-request acceptance (``request_metrics``), paired verdicts
(``paired``), speedups (``speedup``), charts (``charts``) and progress lines
(``progress``).

It imports the runtime's ``compat`` only.
"""
