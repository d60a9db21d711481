"""What an operator can ask a running server (the e2e files' shared servers, one with the
tiny draft, one without): the plugin's plan on /metrics (serving/plan_metric.py),
``vllm-kimi-eagle status URL`` (live acceptance over a window, held to vLLM's own
counters over the same window), and ``compare --url``, which sends the same requests to
servers already running and gives what ``compare`` gives when it starts them itself."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from tests.helpers import run_cli
from vllm_kimi_eagle.fixtures import corpus
from vllm_kimi_eagle.serving.plan_metric import METRIC
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.figures import spec_metrics

pytestmark = pytest.mark.engine


def test_the_plan_the_workers_enacted_is_on_metrics(shared_servers):
    plan = [(dict(labels), value) for labels, value in
            shared_servers["draft"].scrape().samples.get(METRIC, {}).items()]
    print(f"\n{plan}")
    [(labels, value)] = plan
    assert value == 1.0 and labels["self_check"] == "enacted"
    assert (labels["draft_class"], labels["capture_ids"], labels["nope"], labels["worker"]) \
        == ("plugin", "2,3,5", "false", "tp0")
    assert labels["rope_theta"] == "50000" and labels["convention"] == "input-of"
    assert METRIC not in shared_servers["none"].scrape().samples


def test_status_reads_the_plan_and_the_windows_acceptance_as_vllm_counts_it(shared_servers,
                                                                             tmp_path):
    """status runs its window while requests are sent, and nothing else: its acceptance
    and the counters the test reads around the same requests agree within 0.01."""
    server = shared_servers["draft"]
    model = server.model_name()
    result = {}

    def run_status():
        result["done"] = run_cli("status", server.base_url, "--window", "25", "--json",
                                 timeout=300)

    thread = threading.Thread(target=run_status)
    thread.start()
    time.sleep(8)  # status's first scrape is behind it
    before = server.spec_counters()
    for prompt in corpus.demo_prompts(4, seed=21):
        vllm_server.chat(server, model, prompt, 48)
    counted = server.spec_counters() - before
    thread.join()
    done = result["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\nstatus: {found['acceptance']}; vLLM's counters: {counted.summary()}")
    assert counted.drafts > 0, "no draft proposed"
    assert abs(found["acceptance"]["acceptance_length"] - counted.acceptance_length) <= 0.01
    assert found["acceptance"]["drafts"] == int(counted.drafts)
    [row] = found["plan"]
    assert row["enacted"] and row["capture_ids"] == "2,3,5"
    text = run_cli("status", shared_servers["none"].base_url, "--window", "0", timeout=120)
    assert text.returncode == 0, text.stderr[-2000:]
    assert "plugin        not acting on a draft here" in text.stdout
    assert "the server drafts nothing" in text.stdout


def test_status_names_what_is_not_a_vllm_server(tmp_path):
    done = run_cli("status", "http://127.0.0.1:9", "--window", "0", timeout=60)
    assert done.returncode == 2 and "could not be read" in done.stderr


def without_seed(args: list[str]) -> list[str]:
    """The shared servers' arguments but --seed, which every server compare starts gets."""
    at = args.index("--seed")
    return args[:at] + args[at + 2:]


def test_compare_on_running_servers_gives_what_compare_starting_them_gives(
        tiny, shared_servers, tmp_path):
    """The same requests to the shared pair (--url) and to the servers compare starts with
    the same settings: the same answers, the same acceptance by vLLM's counters, the same
    greedy verdict. The shared pair reports no per-request figures (started without vLLM's
    flag, which compare's own servers get): its acceptance is the window's, and compare
    says so; the servers compare starts give acceptance by prompt length too, pooled as
    vLLM's counters pool it."""
    from tests.e2e.conftest import SHARED_SERVER_ARGS, SHARED_SERVER_K

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}],
                                           "max_tokens": 32}) + "\n"
                               for p in corpus.demo_prompts(4, seed=33)))
    on_running = run_cli("compare", "--url", f"no-draft={shared_servers['none'].base_url}",
                         "--url", f"draft={shared_servers['draft'].base_url}",
                         "--prompts", str(prompts), "--out", str(tmp_path / "running"),
                         timeout=900)
    assert on_running.returncode == 0, on_running.stderr[-3000:]
    started = run_cli("compare", "--target", os.path.join(tiny, "target"),
                      "--draft", os.path.join(tiny, "draft"), "--num-speculative-tokens",
                      str(SHARED_SERVER_K), "--prompts", str(prompts),
                      *[f"--server-arg={a}" for a in without_seed(SHARED_SERVER_ARGS)],
                      "--out", str(tmp_path / "started"), timeout=1800)
    assert started.returncode == 0, started.stderr[-3000:]
    ours = json.load(open(tmp_path / "running" / "report.json"))
    theirs = json.load(open(tmp_path / "started" / "report.json"))
    mine, other = ours["runs"]["draft"]["variants"]["sent"], \
        theirs["runs"]["draft"]["variants"]["sent"]
    print(f"\nrunning: {mine['window']}\nstarted: {other['window']}")
    assert mine["window"]["drafts"] > 0, "no draft proposed"
    assert [r["text"] for r in mine["requests"]] == [r["text"] for r in other["requests"]]
    assert mine["window"] == other["window"]
    assert ours["greedy"] == theirs["greedy"] and ours["greedy"]["draft/sent"]["differ"] == []
    assert "the acceptance shown is the server's aggregate" in on_running.stdout
    [bucket] = theirs["by_prompt_length"]["draft/sent"]
    assert bucket["prompt_tokens"] == "0-512" and bucket["requests"] == 4
    assert bucket["pooled"] == pytest.approx(other["window"]["acceptance_length"], abs=1e-4)
    assert "by prompt length (tokens): 0-512" in started.stdout


def test_bench_e2e_measures_servers_already_running(shared_servers, tmp_path):
    """bench-e2e --url on the shared pair: the plugin's server at k=3 against the one
    without speculation, its windows checked to have drafted, no server started."""
    done = run_cli("bench-e2e", "--url", f"none={shared_servers['none'].base_url}",
                   "--url", f"plugin:3={shared_servers['draft'].base_url}",
                   "--concurrency", "1", "--repeats", "1", "--max-tokens", "16",
                   "--prompts", "2", "--out", str(tmp_path / "bench"), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.load(open(tmp_path / "bench" / "bench-e2e.json"))
    cells = {(c["config"], c["k"], c["concurrency"]): c for c in result["cells"]}
    plugin = cells[("plugin", 3, 1)]
    print(f"\n{done.stdout[-600:]}")
    assert plugin["acceptance_length"] > 1.0, plugin
    assert "starting" not in done.stderr
