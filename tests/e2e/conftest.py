"""Servers shared by the e2e files whose checks only send requests: vLLM's OpenAI server on
the tiny target, without and with the draft. A file whose check stops, breaks or
configures its server starts its own and says why."""

from __future__ import annotations

import os
from contextlib import ExitStack

import pytest

from tests.conftest import SAME_WORKER, project_file
from tests.helpers import BASE_ENV, FP32, preloaded_process
from vllm_kimi_eagle.tools.engines import start_log, vllm_server

# What both servers are started with; they differ in the speculative config alone.
SHARED_SERVER_ARGS = ["--max-model-len", "512", "--seed", "0", *FP32]
SHARED_SERVER_K = 3
_PAIR: dict = {}  # "servers" and the "stack" that stops them, while they are up


@pytest.fixture(scope="session", autouse=True)
def _preloaded_vllm():
    """This worker's preloaded vLLM (tests/helpers.preloaded_process), up before the first
    test here, so that what even the first one starts, in a tool called in this process
    too, is forked from it."""
    preloaded_process()


@pytest.fixture
def shared_servers(tiny, tmp_path_factory):
    """{"none": no speculation, "draft": the tiny EAGLE3 draft at k=3}, started by the first
    test that asks and stopped after the last test of the files that use them (SAME_WORKER
    in tests/conftest.py: one worker runs them one after the other, so the run starts the
    pair once). Tests read counters as differences."""
    if not _PAIR:
        out = tmp_path_factory.mktemp("shared-servers")
        spec = {"method": "eagle3", "model": os.path.join(tiny, "draft"),
                "num_speculative_tokens": SHARED_SERVER_K}
        with ExitStack() as stack:
            servers = {name: stack.enter_context(vllm_server.running_server(
                os.path.join(tiny, "target"), str(out / f"server-{name}.log"), speculative,
                SHARED_SERVER_ARGS, env={**BASE_ENV, start_log.SHARED: "1"}))
                for name, speculative in (("none", None), ("draft", spec))}
            _PAIR.update(servers=servers, stack=stack.pop_all())
    return _PAIR["servers"]


def _stop_pair() -> None:
    if _PAIR:
        _PAIR.pop("stack").close()
        _PAIR.clear()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """The shared pair stops once the next test is not in one of the files that use it."""
    if nextitem is None or project_file(nextitem) not in SAME_WORKER:
        _stop_pair()


def pytest_sessionfinish(session):
    """A run cut short (-x, an interrupt) stops the pair too."""
    _stop_pair()
