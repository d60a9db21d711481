"""Servers shared by the e2e files whose checks only send requests: vLLM's OpenAI server on
the tiny target, without and with the draft. A file whose check stops, breaks or
configures its server starts its own and says why."""

from __future__ import annotations

import os
from contextlib import ExitStack

import pytest

from tests.helpers import BASE_ENV, FP32
from vllm_kimi_eagle.tools import vllm_server

# What both servers are started with; they differ in the speculative config alone.
SHARED_SERVER_ARGS = ["--max-model-len", "512", "--seed", "0", *FP32]
SHARED_SERVER_K = 3


@pytest.fixture(scope="session")
def shared_servers(tiny, tmp_path_factory):
    """{"none": no speculation, "draft": the tiny EAGLE3 draft at k=3}, up for the rest of
    this pytest worker's run. The files that use them run on one worker (tests/conftest.py,
    SAME_WORKER), so the run starts the pair once. Tests read counters as differences."""
    out = tmp_path_factory.mktemp("shared-servers")
    spec = {"method": "eagle3", "model": os.path.join(tiny, "draft"),
            "num_speculative_tokens": SHARED_SERVER_K}
    with ExitStack() as stack:
        yield {name: stack.enter_context(vllm_server.running_server(
            os.path.join(tiny, "target"), str(out / f"server-{name}.log"), speculative,
            SHARED_SERVER_ARGS, env=BASE_ENV))
            for name, speculative in (("none", None), ("draft", spec))}
