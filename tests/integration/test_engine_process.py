"""The engine-in-a-process helper: result lines, errors, timeouts (real child processes,
no vLLM)."""

from __future__ import annotations

import sys
import time

import pytest

from vllm_kimi_eagle.tools.engines import engine_process

CHILD = """
import sys
from vllm_kimi_eagle.tools.engines import engine_process
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


# A session child that fails as vLLM's engine does: the real error logged by the engine
# core, a generic one raised to the caller.
FAILING_SESSION = """
import sys
from vllm_kimi_eagle.tools.engines import engine_process
def start(spec):
    print("(EngineCore pid=7) ERROR 11-25 09:30:01 [core.py:1] RuntimeError: expect weight to "
          "be bfloat16, float16, int8, fp8_e4m3 or uint8(mxfp4 or int4)", flush=True)
    raise RuntimeError("Engine core initialization failed. See root cause above.")
engine_process.run_child(start, sys.argv[1])
"""


def test_a_session_that_fails_names_the_engines_error(tmp_path):
    """A session's error result carries its log and the engine's failing line, as run()'s
    does, and a tool's message shows that line first (calibrate once ended in KeyError)."""
    from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError
    from vllm_kimi_eagle.tools.calibrate.capture import checked

    log = str(tmp_path / "engine.log")
    session = engine_process.Session([sys.executable, "-c", FAILING_SESSION, "{}"], log)
    result = session.next_result(60)
    session.close()
    assert result["error"].startswith("RuntimeError: Engine core initialization failed")
    assert result["log"] == log and "expect weight" in result["log_tail"]
    assert result["cause"].startswith("RuntimeError: expect weight to be bfloat16")
    with pytest.raises(CalibrationError) as err:
        checked(result, "capture")
    message = str(err.value)
    assert message.startswith("the capture engine failed: RuntimeError: Engine core")
    assert "the engine's log says: RuntimeError: expect weight to be bfloat16" in message
    assert f"log {log} ends with" in message


def test_a_server_error_names_the_engines_error(tmp_path):
    from vllm_kimi_eagle.tools.engines import vllm_server

    log = tmp_path / "server.log"
    log.write_text("INFO starting\n(EngineCore pid=7) ERROR [core.py:1] RuntimeError: expect "
                   "weight to be bfloat16\nRuntimeError: Engine core initialization failed. "
                   "See root cause above. Failed core proc(s): {}\n")
    err = vllm_server.Server("http://127.0.0.1:1", str(log)).failed(
        "exited with code 1 before it was ready")
    first = str(err).splitlines()[0]
    assert first == ("the vLLM server exited with code 1 before it was ready: RuntimeError: "
                     "expect weight to be bfloat16")


def test_a_bare_assertion_is_named_with_its_statement(tmp_path):
    """vLLM's kernels fail on bare asserts (seen on a GPU: a block-FP8 draft with
    non-square blocks); the cause shows the failing statement, not nothing."""
    log = tmp_path / "engine.log"
    prefix = "(EngineCore pid=1514) ERROR 11-26 02:10:25 [core.py:1330] "
    log.write_text("".join(prefix + line + "\n" for line in (
        'Traceback (most recent call last):',
        '  File "/x/vllm/model_executor/layers/quantization/utils/fp8_utils.py", line 930',
        '    assert triton.cdiv(A.shape[-1], block_k) == As.shape[-1]',
        '           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^',
        'AssertionError')) + "RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {}\n")
    assert engine_process.last_error_line(str(log)) == (
        "AssertionError: assert triton.cdiv(A.shape[-1], block_k) == As.shape[-1]")
