"""The CPU build's mends: defects of vLLM's CPU build that speculative decoding meets.

The rejection sampler (``cpu_sampler``), draft tokens verified in the MLA decode kernel
(``cpu_mla_verify``), the MLA backend a float32 engine can load (``cpu_mla_backend``) and
no unused vocabulary table held in an engine with a draft (``cpu_memory``). Each changes
nothing on a build with Triton (GPUs), and each serves every speculative method.

It imports ``compat`` and ``vllm_kimi_eagle.settings`` only.
"""
