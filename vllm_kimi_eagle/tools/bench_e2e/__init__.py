"""``vllm-kimi-eagle bench-e2e``: which num_speculative_tokens, at which concurrency.

Serves the target through vLLM's OpenAI server in up to four configurations (``CONFIGS``):
no speculation, the plugin's draft class, vLLM's in-tree class
(``VLLM_KIMI_EAGLE_DRAFT=upstream``) and the plugin with the greedy shortcut off
(``"use_local_argmax_reduction": false`` in the speculative config), for every k
(``num_speculative_tokens``) and concurrency asked for, and prints per concurrency the k
with the best speedup over no speculation, or that no k beats it.

How it is measured, the same way for every configuration:

- For one k, the servers of every configuration are alive together (the no-speculation
  server for the whole run; ``--max-servers`` splits them into groups, one after the
  other, each beside the no-speculation server); each gets the same warm-up (one batch of
  the largest concurrency). Then ``--repeats`` rounds; in each round every concurrency,
  and for each concurrency every configuration of the group and no speculation once, in
  the next order of a balanced (Williams) design: every configuration takes every place
  and follows every other equally often (``grid.balanced_order``). So a cell's repeats
  are spread over its group's whole measurement time, interleaved with the other
  configurations', and no pair is always measured back to back.
- One server is measured at a time, the others frozen; on a CPU its engine computes on
  CPUs of its own, apart from its API server and the client (``measure``).
- One window: the same requests (greedy, ``ignore_eos``, ``--max-tokens`` each; at
  least as many requests as the concurrency, the prompts cycled), sent by
  ``concurrency`` client threads, between two ``/metrics`` scrapes.
- Output tokens/s is the client's figure: completion tokens over the window's wall time.
  Time per output token is the server's (``vllm:request_decode_time_seconds`` over the
  tokens after each request's first, ``spec_metrics.time_per_output_token_ms``).
  Acceptance length and per-position acceptance come from the window's spec-decode
  counters; a speculative window in which no draft was proposed is an error.
- A cell (configuration × k × concurrency) reports median, min and max over its repeats;
  its acceptance is pooled over the repeats' counters. Its speedup is the ratio of
  medians, its own over the no-speculation server's in the same rounds; plugin / in-tree
  is the ratio of their speedups (with one server group: of their medians).
"""
