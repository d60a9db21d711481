"""The account of engine and server starts: phases read from a start's log, the median
start, and a configuration a worker started twice (tools/engines/start_phases.py,
start_log.py)."""

import json

from vllm_kimi_eagle.tools.engines import start_log, start_phases

# A server's log as vLLM 0.32 writes it (abridged), each line with the second it was read.
SERVER = [
    (0.1, "$ python -m vllm.entrypoints.openai.api_server --model target --port 4"),
    (9.0, "(APIServer pid=5) INFO 11-28 12:33:19 [api_utils.py:286] non-default args: {}"),
    (9.5, "(APIServer pid=5) INFO 11-28 12:33:19 [model.py:733] Resolved architecture: X"),
    (10.0, "(APIServer pid=5) INFO 11-28 12:33:19 [compilation.py:317] Enabled custom fusions"),
    (10.1, "Triton is installed, but doesn't include CPU backend. Disabling Triton."),
    (20.0, "(EngineCore pid=6) INFO 11-28 12:33:40 [__init__.py:60] vllm-kimi-eagle loaded"),
    (20.2, "(EngineCore pid=6) INFO 11-28 12:33:40 [core.py:133] Initializing a V1 LLM engine"),
    (31.0, "(Worker pid=7) INFO 11-28 12:34:09 [cpu_model_runner.py:68] Starting to load model"),
    (35.0, "(Worker pid=7) INFO 11-28 12:34:16 [cpu_worker.py:260] Explicitly set (1.0/19.21) "
           "GiB for KV cache on node 0."),
    (36.0, "(EngineCore pid=6) INFO 11-28 12:34:17 [core.py:402] init engine (profile, create "
           "kv cache, warmup model) took 0.46 s"),
    (38.5, "(APIServer pid=5) INFO 11-28 12:34:18 [launcher.py:195] Route: /health"),
]


def test_a_servers_phases_split_where_each_process_begins():
    phases = start_phases.phases(SERVER, ready_s=39.0)
    assert phases == {"process": 9.0, "config": 1.0, "engine process": 10.2, "worker": 10.8,
                      "load": 4.0, "kv cache": 1.0, "until ready": 3.0}
    assert sum(phases.values()) == 39.0


def test_an_in_process_engine_has_no_engine_process_and_compiles_when_it_says_so():
    lines = [
        (2.0, "(MainProcess pid=1) INFO 11-28 12:00:00 [api_utils.py:286] non-default args"),
        (2.5, "(MainProcess pid=1) INFO 11-28 12:00:00 [core.py:133] Initializing a V1 LLM "
              "engine (v0.32.0)"),
        (3.0, "(MainProcess pid=1) INFO 11-28 12:00:00 [cpu_model_runner.py:68] Starting to "
              "load model t"),
        (4.0, "(MainProcess pid=1) INFO 11-28 12:00:00 [cpu_model_runner.py:87] Warming up "
              "model for the compilation..."),
        (60.0, "(MainProcess pid=1) INFO 11-28 12:01:00 [cpu_worker.py:260] Explicitly set "
               "(1.0/19.21) GiB for KV cache on node 0."),
        (61.0, "(MainProcess pid=1) INFO 11-28 12:01:00 [core.py:402] init engine (profile, "
               "create kv cache, warmup model) took 57 s"),
    ]
    phases = start_phases.phases(lines, ready_s=61.5)
    assert phases == {"process": 2.0, "config": 0.0, "engine process": 0.5, "worker": 0.5,
                      "load": 1.0, "compile": 56.0, "kv cache": 1.0, "until ready": 0.5}


def test_a_start_that_logged_nothing_is_all_process_and_lines_after_ready_do_not_count():
    assert start_phases.phases([(1.0, "Traceback (most recent call last):")], 4.0) == {
        "process": 4.0}
    late = SERVER[:2] + [(50.0, SERVER[6][1])]
    assert start_phases.phases(late, ready_s=12.0) == {"process": 9.0, "config": 3.0}


def test_ready_is_the_childs_ready_line_or_its_first_result():
    lines = [(1.0, "x"), (5.0, start_phases.READY_LINE), (9.0, "VLLM_KIMI_EAGLE_RESULT {}")]
    assert start_phases.ready_at(lines) == 5.0
    assert start_phases.ready_at(lines[::2]) == 9.0
    assert start_phases.ready_at(lines[:1]) is None


def test_stamped_reads_lines_as_they_are_written(tmp_path):
    log = tmp_path / "start.log"
    log.write_text("")
    with start_phases.Stamped(str(log)) as stamped:
        with open(log, "a") as f:
            f.write("first\nsecond without its end")
            f.flush()
            f.write("\n")
    assert [line for _, line in stamped.lines] == ["first", "second without its end"]
    assert all(t >= 0 for t, _ in stamped.lines)


def _start(worker: str, identity: str, test: str, seconds: float, **extra) -> dict:
    return {"kind": "engine", "label": f"engine {identity}", "identity": identity,
            "seconds": seconds, "test": test, "worker": worker, **extra}


def test_the_account_gives_the_median_start_each_phase_and_restarts():
    starts = [
        _start("gw0", "a", "t1", 10.0, startup_s=4.0, phases={"process": 1.0, "load": 3.0}),
        _start("gw0", "b", "t2", 20.0, startup_s=6.0, phases={"process": 2.0, "load": 4.0}),
        _start("gw1", "a", "t3", 30.0, startup_s=8.0),
        _start("gw0", "a", "t4", 10.0, startup_s=5.0),
    ]
    lines = start_log.account([dict(s, shared=True) for s in starts])
    assert "4 (4 engines, 0 servers; 0 forked" in lines[0] and "70 s in all" in lines[0]
    assert "ready after 23 s in all, median 5.5 s" in lines[0]
    assert lines[1].startswith("  to ready, by phase (s, summed): process 3, config 0,")
    assert "load 7" in lines[1] and "not read 13" in lines[1]
    (again,) = [line for line in lines if "started 2 times" in line]
    assert "worker gw0" in again and "(by t1, t4)" in again
    # Not one the suite shares: two tests whose tools each start it are no restart.
    assert start_log.restarted(starts) == []
    shared = [dict(s, shared=True) for s in starts]
    assert start_log.restarted(shared)[0][1:] == (2, ["t1", "t4"])
    # One test that starts a configuration twice is, shared or not.
    assert start_log.restarted([starts[0], dict(starts[3], test="t1")])[0][1:] == (2, ["t1"])
    # Another worker's start of the same configuration, or a start lost to a taken port
    # and made again, is no restart.
    assert start_log.restarted(shared[:3]) == []
    assert start_log.restarted([shared[0], dict(shared[3], lost_port=True)]) == []


def test_an_identity_is_what_was_started_not_its_port_or_what_it_was_asked():
    one = start_log.describe(["-m", "api_server", "--model", "t", "--port", "1234"], {})
    two = start_log.describe(["-m", "api_server", "--model", "t", "--port", "5678"], {})
    other = start_log.describe(["-m", "api_server", "--model", "u", "--port", "1234"], {})
    assert one[1] == two[1] != other[1]
    asked = [start_log.describe(["run.py", json.dumps({"target": "t", **jobs})], {})
             for jobs in ({"prompts": ["a"]}, {"jobs": [{"max_tokens": 4}]}, {})]
    assert asked[0] == asked[1] == asked[2] and "prompts" not in asked[0][0]


def test_a_run_without_starts_says_so_in_one_line():
    assert start_log.account([]) == [
        "engine and server starts: 0 (0 engines, 0 servers; 0 forked from a preloaded vLLM), "
        "0 s in all; ready after 0 s in all, median 0.0 s (engines 0.0 s, servers 0.0 s)"]


def test_a_start_the_suite_shares_is_marked_and_the_suites_own_variables_are_no_identity(
        tmp_path, monkeypatch):
    monkeypatch.setenv(start_log.ENV, str(tmp_path / "starts.jsonl"))
    start_log.record("engine", ["run.py"], {"VLLM_A": "1", start_log.SHARED: "1",
                                           "VLLM_KIMI_EAGLE_TEST_ORDER": "reverse:0"}, 1.0)
    start_log.record("engine", ["run.py"], {"VLLM_A": "1"}, 1.0)
    shared, alone = start_log.read(str(tmp_path / "starts.jsonl"))
    assert shared["shared"] is True and "shared" not in alone
    assert shared["identity"] == alone["identity"] and shared["label"] == alone["label"]
