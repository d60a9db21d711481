"""vllm_server's process handling on real processes (no vLLM): finding a server's engine
processes and pinning engine and front end apart, as bench-e2e does on a CPU."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from vllm_kimi_eagle.tools.engines import vllm_server


def test_split_keeps_the_last_cpu_for_the_front_end_unless_the_user_chose():
    assert vllm_server.split_cpus({0, 1}, {}) == ({0}, {1})
    assert vllm_server.split_cpus({2, 5, 7}, {"VLLM_CPU_OMP_THREADS_BIND": "auto"}) == (
        {2, 5}, {7})
    assert vllm_server.split_cpus({0, 1}, {"VLLM_CPU_OMP_THREADS_BIND": "1"}) is None
    assert vllm_server.split_cpus({3}, {}) is None


def _wait_for_child(pid: int) -> list[int]:
    for _ in range(100):
        found = vllm_server.descendants(pid)
        if found:
            return found
        time.sleep(0.05)
    return []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to split")
def test_pin_puts_the_engine_processes_and_the_front_end_on_their_own_cpus():
    # A stand-in server: a process group whose leader waits on a child, as vLLM's API
    # server waits on its engine core.
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        (child,) = _wait_for_child(leader.pid)
        engine, front = vllm_server.split_cpus(os.sched_getaffinity(0), {})
        server = vllm_server.Server("http://127.0.0.1:1", "unused.log", leader)
        assert server.pin(engine, front)
        assert os.sched_getaffinity(child) == engine
        assert os.sched_getaffinity(leader.pid) == front
    finally:
        vllm_server._stop(leader)
    assert leader.poll() is not None
    assert not server.pin({0}, {1})  # a stopped server is not pinned
