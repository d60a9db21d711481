"""Serving through vLLM's OpenAI server (tools/engines/vllm_server.py): a start whose port was
taken is made again on another; a server that dies in use fails with its log tail;
concurrent requests give what the same requests alone give."""

from __future__ import annotations

import os
import signal
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import BASE_ENV, FP32
from vllm_kimi_eagle.fixtures import corpus
from vllm_kimi_eagle.tools.engines import vllm_server

pytestmark = pytest.mark.engine


def test_a_taken_port_is_left_and_a_dead_server_fails_with_its_log_tail(tiny, tmp_path,
                                                                       monkeypatch):
    """A server of its own: the test kills it. Its first port is taken by the test before
    the server can bind it (the race another process can win in a busy run)."""
    log = str(tmp_path / "server.log")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        ports = [taken_port]
        real_free_port = vllm_server.free_port
        monkeypatch.setattr(vllm_server, "free_port",
                            lambda: ports.pop() if ports else real_free_port())
        with pytest.raises(vllm_server.ServerError) as err:
            with vllm_server.running_server(os.path.join(tiny, "target"), log, None,
                                            ["--max-model-len", "256", *FP32],
                                            env=BASE_ENV) as server:
                assert not ports, "the taken port was not offered"
                assert not server.base_url.endswith(f":{taken_port}")
                with open(log) as f:
                    assert f.readline().startswith(
                        f"# port {taken_port} was taken by another process")
                os.killpg(server.process.pid, signal.SIGKILL)
                server.process.wait()
                server.model_name()
    message = str(err.value)
    print(f"\n{message[:400]}")
    assert "exited with code -9 while it was in use" in message and log in message
    assert "Application startup complete" in message  # the tail of the server's log


def test_sixteen_concurrent_requests_match_the_same_requests_alone(shared_servers):
    server = shared_servers["draft"]
    prompts = corpus.demo_prompts(16, seed=99)
    before = server.spec_counters()
    model = server.model_name()
    alone = [vllm_server.chat(server, model, p, 48)["text"] for p in prompts]
    with ThreadPoolExecutor(max_workers=16) as pool:
        together = list(pool.map(lambda p: vllm_server.chat(server, model, p, 48), prompts))
    counters = server.spec_counters() - before
    print(f"\n16 concurrent requests: acceptance length {counters.acceptance_length:.3f}")
    assert counters.drafts > 0
    assert all(r["completion_tokens"] == 48 for r in together)
    assert [r["text"] for r in together] == alone


def test_a_tool_whose_server_cannot_start_prints_the_engines_error(tiny, tmp_path):
    """``demo`` on a models folder whose target vLLM refuses: one message that opens with
    the line of vLLM's log naming the error, then the log's tail; exit 1, no traceback."""
    import json
    import shutil

    from tests.helpers import run_cli

    models = tmp_path / "models"
    shutil.copytree(os.path.join(tiny, "target"), models / "target")
    shutil.copy(os.path.join(tiny, "BUILT.json"), models / "BUILT.json")
    config = json.loads((models / "target" / "config.json").read_text())
    (models / "target" / "config.json").write_text(
        json.dumps(dict(config, architectures=["KimiNoSuchForCausalLM"])))
    done = run_cli("demo", "--models", str(models), "--target", "target", "--draft", "draft",
                   "--out", str(tmp_path / "out"), timeout=600)
    said = [line for line in done.stderr.splitlines() if line.startswith("vllm-kimi-eagle demo:")]
    print(f"\n{said[:1]}")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert len(said) == 1 and "the vLLM server exited with code" in said[0]
    assert "KimiNoSuchForCausalLM" in said[0]  # vLLM's own error line, in the first line


def test_compare_records_a_bad_request_and_goes_on(shared_servers):
    """compare's sending on a live server with the draft: a request vLLM refuses (HTTP 400)
    and one longer than the server's context are recorded with their ids and why, the
    others answered in full; the analysis leaves the failed ones out and names them. (The
    shared server reports no per-request figures: the figures' own rule is tested in
    tests/unit/test_compare.py.)"""
    from vllm_kimi_eagle.tools.compare import analysis, run, traffic

    server = shared_servers["draft"]
    good = [traffic.Request(f"t.jsonl:{i + 1}", messages=({"role": "user", "content": p},))
            for i, p in enumerate(corpus.demo_prompts(4, seed=5))]
    refused = traffic.Request("t.jsonl:5", prompt="the capital of", sampling={"max_tokens": -5})
    too_long = traffic.Request("t.jsonl:6", prompt=" ".join(["the"] * 600))
    sent = run.send_all(server, server.model_name(), [*good[:2], refused, too_long, *good[2:]],
                        raw=False, max_tokens=16, concurrency=2, label="bad requests")
    by_id = {r["id"]: r for r in sent["requests"]}
    assert [r["id"] for r in sent["requests"]] == [r.id for r in (*good[:2], refused, too_long,
                                                                   *good[2:])]
    assert "HTTP 400" in by_id["t.jsonl:5"]["error"], by_id["t.jsonl:5"]
    assert "not sent: its prompt is" in by_id["t.jsonl:6"]["error"]
    assert "max_model_len 512" in by_id["t.jsonl:6"]["error"]
    answered = analysis.answered(sent)
    assert [r["id"] for r in answered] == [r.id for r in good]
    assert all(r["output_tokens"] == 16 and r["text"] for r in answered)
    assert sent["window"]["drafts"] > 0  # the draft drafted for the answered ones
    runs = {"draft": {"speculative_config": {"model": "d"}, "variants": {"sent": sent}}}
    (line,) = analysis.failures(runs)
    assert line.startswith("draft/sent: 2 of 6 requests failed and are left out "
                           "(t.jsonl:5, t.jsonl:6); first: t.jsonl:5: ")
    greedy = analysis.greedy_agreement({"no-draft": {"variants": {"sent": sent}},
                                        "draft": {"variants": {"sent": sent}}})
    assert greedy["draft/sent"] == {"compared": 4, "differ": []}  # the failed ones left out
