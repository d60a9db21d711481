"""Engines forked from a preloaded vLLM (tests/preloaded_vllm.py) see what a fresh
interpreter sees: the same environment once vLLM is imported, arguments, working folder
and search path, no plugin module; a run past its time is stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import preloaded_vllm
from tests.helpers import BASE_ENV, CLI_MODULE

PROBE = """
import json, os, sys
from vllm import LLM  # what a fresh engine child does first
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                  "env": dict(os.environ), "name": __name__,
                  "plugin_modules": sorted(m for m in sys.modules
                                           if m.startswith("vllm_kimi_eagle"))}))
sys.exit(int(sys.argv[1]))
"""


def test_only_late_read_variables_may_change_after_the_fork():
    started = {"A": "1", "PATH": "/bin"}
    after = {**started, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    assert preloaded_vllm.served_by_fork(dict(started), started, after)
    for late in ({"VLLM_PLUGINS": ""}, {"VLLM_KIMI_EAGLE_DRAFT": "upstream"},
                 {"KIMI_EAGLE_TEST_DRAFT_MM_EMBEDDINGS": "1"}, {"PYTEST_CURRENT_TEST": "t"}):
        assert preloaded_vllm.served_by_fork({**started, **late}, started, after), late
    # What importing vLLM sets anyway may be there already (a caller that imported vLLM).
    assert preloaded_vllm.served_by_fork(after, started, after)
    for early in ({"HF_ENDPOINT": "http://127.0.0.1:1"}, {"HF_HUB_OFFLINE": "1"},
                  {"VLLM_LOGGING_LEVEL": "DEBUG"}, {"A": "2"},
                  {"TORCHINDUCTOR_COMPILE_THREADS": "2"}):
        assert not preloaded_vllm.served_by_fork({**started, **early}, started, after), early
    assert not preloaded_vllm.served_by_fork({"PATH": "/bin"}, started, after)  # A removed


@pytest.fixture(scope="module")
def preloaded(tmp_path_factory):
    zygote = preloaded_vllm.Preloaded({**os.environ, **BASE_ENV},
                                      str(tmp_path_factory.mktemp("zygote") / "log"))
    yield zygote
    zygote.close()
    assert not zygote.alive()


@pytest.mark.parametrize("how", ["script", "-c"])
def test_a_fork_sees_what_a_fresh_interpreter_sees(preloaded, tmp_path, how):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    argv = [str(script), "3"] if how == "script" else ["-c", PROBE, "3"]
    env = {**preloaded.env, "VLLM_KIMI_EAGLE_DRAFT": "upstream"}
    fresh = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True,
                           timeout=300)
    out, err = tmp_path / "out", tmp_path / "err"
    exit_code = preloaded.run(argv, env, str(out), timeout=300, err_path=str(err))
    forked_line = [line for line in out.read_text().splitlines() if line.startswith("{")]
    fresh_line = [line for line in fresh.stdout.splitlines() if line.startswith("{")]
    assert (exit_code, fresh.returncode) == (3, 3), err.read_text()[-2000:]
    forked, fresh = json.loads(forked_line[-1]), json.loads(fresh_line[-1])
    assert forked == fresh
    assert forked["env"]["VLLM_KIMI_EAGLE_DRAFT"] == "upstream"
    assert forked["plugin_modules"] == [] and forked["name"] == "__main__"


def test_a_module_run_in_a_fork_prints_what_it_prints_fresh(preloaded, tmp_path):
    argv = ["-m", CLI_MODULE, "inspect", "/nonexistent-draft"]
    fresh = subprocess.run([sys.executable, *argv], env=preloaded.env, capture_output=True,
                           text=True, timeout=300)
    out, err = tmp_path / "out", tmp_path / "err"
    exit_code = preloaded.run(argv, preloaded.env, str(out), timeout=300, err_path=str(err))
    assert fresh.returncode != 0 and "/nonexistent-draft" in fresh.stderr + fresh.stdout
    assert (exit_code, out.read_text()) == (fresh.returncode, fresh.stdout)
    assert err.read_text().splitlines()[-1] == fresh.stderr.splitlines()[-1]


def test_a_fork_past_its_time_is_stopped_and_the_next_one_runs(preloaded, tmp_path):
    script = tmp_path / "sleeps.py"
    script.write_text("import sys, time\ntime.sleep(float(sys.argv[1]))\n")
    assert preloaded.run([str(script), "600"], preloaded.env, str(tmp_path / "a"), 2) is None
    assert preloaded.run([str(script), "0"], preloaded.env, str(tmp_path / "b"), 60) == 0


ECHO = """
import json, os, sys
from vllm_kimi_eagle.tools.engines import engine_process
engine_process.emit({"started": True, "parent": os.getppid(), "session": os.getsid(0)})
for line in sys.stdin:
    engine_process.emit({"echo": json.loads(line)})
"""


def test_a_tools_session_is_forked_and_talks_through_its_pipe(preloaded, tmp_path):
    """What a tool starts (engine_process.Session here) is a fork of the preloaded process
    the environment names: its stdin a pipe from the tool, in a session of its own."""
    from vllm_kimi_eagle.tools.engines import engine_process
    from vllm_kimi_eagle.tools.engines import preloaded as client

    env = {**preloaded.env, client.ENV: preloaded.socket_path}
    with engine_process.Session([sys.executable, "-c", ECHO], str(tmp_path / "log"),
                                env) as session:
        started = session.next_result(120)
        assert isinstance(session.process, client.Forked)
        assert started["parent"] == preloaded.process.pid
        assert started["session"] == session.process.pid  # it leads a session of its own
        assert session.request({"n": 1}, 60) == {"echo": {"n": 1}}
        assert session.request({"n": 2}, 60) == {"echo": {"n": 2}}
    assert session.process.returncode == 0


def test_an_environment_it_cannot_serve_starts_a_fresh_interpreter(preloaded, tmp_path):
    """A variable read while vLLM is imported differs: the preloaded process refuses, and
    the tool's start is a fresh interpreter, as without it."""
    from vllm_kimi_eagle.tools.engines import preloaded as client

    env = {**preloaded.env, client.ENV: preloaded.socket_path,
           "HF_ENDPOINT": "http://127.0.0.1:9"}
    assert client.popen(["-c", "pass"], env) is None
    with open(tmp_path / "out", "w") as out:
        process = client.start([sys.executable, "-c", "import os; print(os.getppid())"], env,
                               stdout=out)
        assert isinstance(process, subprocess.Popen)
        assert process.wait(60) == 0
    assert int((tmp_path / "out").read_text()) == os.getpid()
