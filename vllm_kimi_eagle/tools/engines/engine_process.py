"""One vLLM engine in a process of its own, for the tools and the tests: start it, read its
result line, keep its log, and stop its whole process group on a timeout.

A fresh process gives each engine a fresh vLLM (the plugin's registrations, environment
variables and the GPU are the engine's alone) and keeps a crash or a hang from taking the
caller down; where ``VLLM_KIMI_EAGLE_PRELOADED`` names a preloaded vLLM process (the test
suite's), that process is a fork of it (``preloaded.start``). The child prints its result
as one line starting with ``RESULT_PREFIX``; its output (vLLM logs to stdout) goes to a log
file, whose tail comes with every error. Each start's line in the account
(``start_log``) gives its phases until the child said it was ready (``announce_ready``).

    result = run([sys.executable, "-m", "some.module", json.dumps(spec)], log, env, 600)

An engine that answers several requests (``Session``) prints a result line when it has
started, then reads one JSON request per line on stdin and prints one result line per
request: the start-up is paid once.

The child side: :func:`child_main` runs a handler on the JSON argument and prints its
result (an exception becomes ``{"error": ...}``); a session's child prints a result line
per request itself (:func:`emit`, :func:`answer`) inside :func:`run_child`. Both end the
process with ``os._exit``: vLLM may leave threads behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable

from vllm_kimi_eagle.tools.engines import preloaded, start_log, start_phases

RESULT_PREFIX = "VLLM_KIMI_EAGLE_RESULT "
TAIL_LINES = 25
POLL_S = 0.2


def log_tail(path: str, lines: int = TAIL_LINES) -> str:
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def results_in(path: str) -> list[dict]:
    """Every result line of a log, in order."""
    try:
        with open(path, errors="replace") as f:
            return [json.loads(line[len(RESULT_PREFIX):]) for line in f.read().splitlines()
                    if line.startswith(RESULT_PREFIX)]
    except OSError:
        return []


def last_error_line(path: str) -> str | None:
    """The last line of the log that names an exception (what to show first), with the
    indented lines that continue it (pydantic's validation errors say what is wrong there)."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = [i for i, line in enumerate(lines)
             if ("Error:" in line and "Engine core initialization failed" not in line)
             or BARE_EXCEPTION.match(_logged(line))]
    if not found:
        return None
    last = lines[found[-1]]
    if BARE_EXCEPTION.match(_logged(last)):  # a bare assert: name its statement
        statement = next((_logged(line) for line in reversed(lines[:found[-1]])
                          if _logged(line).strip("^~ ")), "")
        text = [f"{_logged(last)}: {statement}"]
    else:
        text = [last.split("] ", 1)[-1]]
    for line in lines[found[-1] + 1:]:
        if not line.startswith((" ", "\t")) or line.strip().startswith("For further information"):
            break
        text.append(line.strip())
    return " ".join(text)[:ERROR_LINE_CHARS]


ERROR_LINE_CHARS = 400
# A traceback's last line after a bare ``assert`` (other bare names, such as a server's
# CancelledError at shutdown, are not causes).
BARE_EXCEPTION = re.compile(r"AssertionError$")


def _logged(line: str) -> str:
    """A log line without vLLM's prefix (process, level, time, source)."""
    return line.split("] ", 1)[-1].strip()


def stop_group(process) -> None:
    """Stop the child and everything it started (vLLM's engine core and workers), also
    when the child itself has exited already."""
    stop_session(process.pid)
    process.wait()


def stop_session(pid: int) -> None:
    """Kill the session (process group) that the process ``pid`` leads, if any is left."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def failure(message: str, log_path: str) -> dict:
    result = {"error": message, "log": log_path, "log_tail": log_tail(log_path)}
    cause = last_error_line(log_path)
    if cause:
        result["cause"] = cause
    return result


def failure_text(what: str, result: dict) -> str:
    """An error result as a message: ``what`` failed, the engine's own failing line of its
    log (where it says more than the error), then where the log is and its tail."""
    cause = result.get("cause")
    said = f"\nthe engine's log says: {cause}" if cause and cause not in result["error"] else ""
    return (f"{what} failed: {result['error']}{said}\nlog {result.get('log', '(none)')} "
            f"ends with:\n{result.get('log_tail', '(no log)')}")


def run(command: list[str], log_path: str, env: dict | None = None,
        timeout: float = 3600) -> dict:
    """Run ``command`` with its output in ``log_path``; its last result, or an error result
    (``error``, ``log``, ``log_tail``, ``cause``) when it printed none or ran past
    ``timeout`` seconds, after which its whole process group is stopped."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    started = time.perf_counter()
    with open(log_path, "w") as log, start_phases.Stamped(log_path, started) as stamped:
        process = preloaded.start(command, env, stdout=log, stderr=subprocess.STDOUT)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(process)
            return stopped(timeout, log_path)
        finally:
            stop_group(process)  # what the child left behind
    seconds = time.perf_counter() - started
    record_start("engine", command[1:], env, seconds, stamped,
                 forked=isinstance(process, preloaded.Forked))
    return outcome(log_path, process.returncode, seconds)


def record_start(kind: str, command: list[str], env: dict | None, seconds: float,
                 stamped: start_phases.Stamped, **extra) -> None:
    """The account's line for a start whose log ``stamped`` read: when it was ready (its
    READY_LINE, else its end) and the seconds of each phase until then."""
    ready = start_phases.ready_at(stamped.lines)
    startup = seconds if ready is None else min(ready, seconds)
    start_log.record(kind, command, env, seconds, startup_s=round(startup, 2),
                     phases=stamped.phases(startup), **extra)


def announce_ready() -> None:
    """The child's line saying its engine has started (what the account's phases end at)."""
    print(start_phases.READY_LINE, flush=True)


def stopped(timeout: float, log_path: str) -> dict:
    """The error result of a child stopped after ``timeout`` seconds."""
    return failure(f"no result within {timeout:.0f} s; the engine was stopped", log_path)


def outcome(log_path: str, exit_code: int, seconds: float) -> dict:
    """What a child that ran to its end left in its log: its last result, or an error
    result when it printed none."""
    found = results_in(log_path)
    if not found:
        return failure(f"exited with code {exit_code} after {seconds:.0f} s without a "
                       "result", log_path)
    return with_log(found[-1], log_path)


def with_log(result: dict, log_path: str) -> dict:
    """A child's result; an error result gets where the log is, its tail and its cause."""
    if "error" in result:
        result.update({k: v for k, v in failure(result["error"], log_path).items()
                       if k != "error"})
    return result


class Session:
    """An engine process that answers several requests (one JSON line each on stdin)."""

    def __init__(self, command: list[str], log_path: str, env: dict | None = None):
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        self.log_path = log_path
        self._log = open(log_path, "w")
        self._started, self._command, self._env = time.perf_counter(), command, env
        self._stamped = start_phases.Stamped(log_path, self._started).start()
        self.process = preloaded.start(command, env, stdin=subprocess.PIPE, stdout=self._log,
                                       stderr=subprocess.STDOUT, text=True)
        self._answered = 0

    def request(self, payload: dict, timeout: float) -> dict:
        """Send one request; its result, or an error result (the engine stopped then)."""
        try:
            self.process.stdin.write(json.dumps(payload) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._failed("the engine process had exited before the request")
        return self.next_result(timeout)

    def next_result(self, timeout: float) -> dict:
        """The next result line the engine prints (e.g. its start-up, before any request)."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            found = results_in(self.log_path)
            if len(found) > self._answered:
                self._answered = len(found)
                return with_log(found[-1], self.log_path)
            if self.process.poll() is not None:
                return self._failed(f"the engine process exited with code "
                                    f"{self.process.returncode} without answering")
            time.sleep(POLL_S)
        return self._failed(f"no answer within {timeout:.0f} s; the engine was stopped")

    def _failed(self, message: str) -> dict:
        self.close()
        return failure(message, self.log_path)

    def close(self) -> None:
        if self.process.stdin and not self.process.stdin.closed:
            try:
                self.process.stdin.close()  # the child's loop ends on end of input
            except OSError:
                pass
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        stop_group(self.process)
        if not self._log.closed:
            self._stamped.stop()
            record_start("engine", self._command[1:], self._env,
                         time.perf_counter() - self._started, self._stamped, session=True,
                         forked=isinstance(self.process, preloaded.Forked))
        self._log.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- the child's side ------------------------------------------------------------------------
ERROR_CHARS = 4000


def error_text(err: Exception) -> str:
    """An exception as one result's error: its head says what failed (vLLM names the
    architecture there), its tail why; a long middle is cut."""
    text = f"{type(err).__name__}: {err}"
    if len(text) <= ERROR_CHARS:
        return text
    half = ERROR_CHARS // 2
    return f"{text[:half]} [...] {text[-half:]}"


def emit(result: dict) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def answer(handler: Callable[[dict], dict], request: dict | str) -> dict:
    """``handler``'s result for a request (a dict or one JSON line); an exception becomes
    ``{"error": ...}``, with its traceback in the log."""
    try:
        return handler(json.loads(request) if isinstance(request, str) else request)
    except Exception as err:  # the parent reports it, with the log
        traceback.print_exc()
        return {"error": error_text(err)}


def child_main(handler: Callable[[dict], dict], argument: str) -> None:
    """Run ``handler`` on the JSON ``argument``, print its result line and exit."""
    emit(answer(handler, argument))
    _exit()


def run_child(function: Callable[[dict], None], argument: str) -> None:
    """Run ``function`` on the JSON ``argument`` (it prints its own result lines, e.g. a
    session's), then exit; an exception it lets out becomes an error line."""
    try:
        function(json.loads(argument))
    except Exception as err:
        traceback.print_exc()
        emit({"error": error_text(err)})
    _exit()


def _exit() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # vLLM may leave non-daemon threads behind; the result lines are all we need
