"""Print how long register() takes in a process where vLLM is already imported.

    .venv/bin/python benchmarks/registration_time.py

A figure, not a test: register() runs in every vLLM process and should stay cheap.
"""

import time

import vllm  # noqa: F401  (vLLM processes have it imported before plugins load)
from vllm import ModelRegistry  # noqa: F401

import vllm_kimi_eagle

start = time.perf_counter()
vllm_kimi_eagle.register()
first = time.perf_counter() - start
start = time.perf_counter()
vllm_kimi_eagle.register()
again = time.perf_counter() - start
print(f"register(): first call {first * 1000:.1f} ms, second call {again * 1e6:.1f} us")
