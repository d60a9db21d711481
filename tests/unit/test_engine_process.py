"""The engine-in-a-process helper: result lines, errors, timeouts (real child processes,
no vLLM)."""

from __future__ import annotations

import sys
import time

from vllm_kimi_eagle.tools import engine_process

CHILD = """
import sys
from vllm_kimi_eagle.tools import engine_process
def handler(request):
    if request.get("fail"):
        raise ValueError("Model architectures ['Eagle3Nothing'] are not supported. " + "x" * 9000)
    return {"echo": request["value"]}
engine_process.child_main(handler, sys.argv[1])
"""


def test_a_result_line_comes_back(tmp_path):
    result = engine_process.run([sys.executable, "-c", CHILD, '{"value": 7}'],
                                str(tmp_path / "log"), None, 60)
    assert result == {"echo": 7}, result


def test_a_long_error_keeps_its_head_and_tail(tmp_path):
    result = engine_process.run([sys.executable, "-c", CHILD, '{"fail": true}'],
                                str(tmp_path / "log"), None, 60)
    assert result["error"].startswith("ValueError: Model architectures ['Eagle3Nothing']")
    assert result["error"].endswith("x" * 100)
    assert len(result["error"]) <= engine_process.ERROR_CHARS + 10


def test_a_timeout_stops_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    hang = ("import subprocess, sys, time\n"
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(600)\n")
    started = time.monotonic()
    result = engine_process.run([sys.executable, "-c", hang], str(tmp_path / "log"), None, 3)
    assert "error" in result and time.monotonic() - started < 60, result
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.2)
    assert not _alive(grandchild), "the engine's own child outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
