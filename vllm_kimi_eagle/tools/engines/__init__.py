"""Engines and servers the tools start: vLLM's OpenAI server (``vllm_server``), one
engine in a process of its own (``engine_process``, ``engine_case``), what a start-up log
says (``start_log``) and which GPU model runner a target gets (``vllm_runners``).

It imports ``figures`` and the runtime's ``compat``.
"""
