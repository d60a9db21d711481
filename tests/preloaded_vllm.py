"""Engine children forked from a process that has imported vLLM already.

Importing vLLM is most of a small engine's start, and the suite starts dozens of them
(docs/measurements.md, "The test suite's time"). Each pytest worker keeps one process that has
done ``from vllm import LLM`` and nothing else: no plugin imported, vLLM's plugins not
loaded, no engine, vLLM's environment cache off (it refuses to serve otherwise). An engine
run (and a test's ``python -c``/``-m`` child) is a fork of it that takes the request's
environment, working folder and arguments, then runs them as ``python ARGS`` would, in a
session of its own, its output in files. vLLM forks its own engine core from such a process
the same way.

A variable read while vLLM is imported (huggingface_hub's HF_ENDPOINT, vLLM's logging
level, ...) cannot change after the fork, so a request whose environment differs from the
preloaded process's in any variable that is not read later (``LATE_READ``) starts a fresh
interpreter instead (``served_by_fork``; tests/helpers.py asks it before each run).

    python tests/preloaded_vllm.py     # the preloaded process: one JSON request per line
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

# Read by the plugin, the test scripts and vLLM's plugin loader when an engine starts,
# never while vLLM is imported: a fork may take new values of these.
LATE_READ_PREFIXES = ("VLLM_KIMI_EAGLE_", "KIMI_EAGLE_TEST_")
LATE_READ = ("VLLM_PLUGINS", "PYTEST_CURRENT_TEST")
READY = "preloaded-vllm-ready"
START_TIMEOUT = 600


def served_by_fork(env: dict, started_with: dict, after_import: dict) -> bool:
    """Whether a run with ``env`` may be forked from a process started with the
    environment ``started_with`` that had ``after_import`` once vLLM was imported (vLLM
    sets a few variables as it loads): ``env`` differs from both in late-read variables
    only."""
    changed = {k for k in env.keys() | started_with.keys()
               if env.get(k) != started_with.get(k) and env.get(k) != after_import.get(k)}
    return all(k in LATE_READ or k.startswith(LATE_READ_PREFIXES) for k in changed)


# ---- the preloaded process ----------------------------------------------------------

def _fresh_enough() -> str | None:
    """Why forking now would not give a fresh vLLM process, or None."""
    import vllm.envs

    plugin = sorted(m for m in sys.modules if m.split(".")[0] == "vllm_kimi_eagle")
    if plugin:
        return f"the plugin is imported here ({plugin[0]})"
    cached = getattr(vllm.envs, "_is_envs_cache_enabled", lambda: False)
    if cached():
        return "vLLM's environment cache is on"
    return None


def _child(request: dict, set_by_import: dict) -> None:
    """In the fork: become ``python ARGV...`` (a script, ``-c CODE`` or ``-m MODULE``, then
    its arguments) with the request's environment."""
    code = 1
    try:
        os.close(_REPLIES.fileno())  # the preloaded process's alone
        os.setsid()
        os.dup2(os.open(request["out"], os.O_WRONLY | os.O_APPEND), 1)
        os.dup2(os.open(request["err"], os.O_WRONLY | os.O_APPEND), 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.environ.clear()
        os.environ.update({**request["env"], **set_by_import})
        os.chdir(request["cwd"])
        _run_as_main(list(request["argv"]))
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run_as_main(argv: list[str]) -> None:
    """Run what ``python ARGV...`` runs, as ``__main__``, with the same sys.argv and
    sys.path[0]."""
    import runpy
    import types

    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file first
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(argv[0])
        sys.argv = argv
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")


_REPLIES = sys.stdout


def _reply(message: dict) -> None:
    _REPLIES.write(json.dumps(message) + "\n")
    _REPLIES.flush()


def serve() -> None:
    # Replies go out on their own descriptor: what vLLM prints while it is imported (some
    # releases log to stdout) goes to this process's log with the rest of its output.
    global _REPLIES
    _REPLIES = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    started_with = dict(os.environ)
    import vllm.entrypoints.llm  # noqa: F401  the import every fork shares (vllm.LLM)

    problem = _fresh_enough()
    if problem:
        raise SystemExit(f"preloaded vLLM: {problem}")
    # What importing vLLM set: a fresh process with the request's environment would set
    # the same (served_by_fork), so each fork gets it too.
    set_by_import = {k: v for k, v in os.environ.items() if started_with.get(k) != v}
    _reply({"ready": READY, "env": dict(os.environ)})
    for line in sys.stdin:
        request = json.loads(line)
        problem = _fresh_enough()
        if problem:
            _reply({"refused": problem})
            continue
        pid = os.fork()
        if pid == 0:
            _child(request, set_by_import)
        _reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _reply({"exit": os.waitstatus_to_exitcode(status)})


# ---- the pytest side ------------------------------------------------------------------
# (The plugin's modules are imported here only: the preloaded process must not load them.)

class Preloaded:
    """One preloaded process and its replies (one run at a time)."""

    def __init__(self, env: dict, log_path: str):
        self.env = dict(env)
        self._buffer = b""
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, env=self.env, start_new_session=True)
        ready = self._next(START_TIMEOUT)
        if not ready or ready.get("ready") != READY:
            self.close()
            raise RuntimeError(f"the preloaded vLLM process did not start: {ready} "
                               f"(its log: {log_path})")
        self.after_import = ready["env"]

    def alive(self) -> bool:
        return self.process.poll() is None

    def _next(self, timeout: float) -> dict | None:
        """The next reply line, or None after ``timeout`` seconds or if the process ended."""
        deadline = time.monotonic() + timeout
        out = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
            chunk = os.read(out, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, argv: list[str], env: dict, log_path: str, timeout: float,
            err_path: str | None = None) -> int | None:
        """Run ``argv`` (what follows ``python``) in a fork with ``env``, its output in
        ``log_path`` (its stderr in ``err_path`` if given); its exit code, or None when it
        ran past ``timeout`` (its session is then stopped). What the run left behind in
        its session is stopped either way."""
        for path in {log_path, err_path or log_path}:
            open(path, "w").close()
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "out": log_path,
                   "err": err_path or log_path}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        started = self._next(60)
        if not started or "pid" not in started:
            raise RuntimeError(f"the preloaded vLLM process did not fork: {started}")
        from vllm_kimi_eagle.tools.engines.engine_process import stop_session

        pid = started["pid"]
        ended = self._next(timeout)
        stop_session(pid)
        if ended is None and not self.alive():
            raise RuntimeError("the preloaded vLLM process ended during a run")
        if ended is None:  # ran past its time: stopped above; the exit line follows
            self._next(60)
            return None
        return ended["exit"]

    def close(self) -> None:
        from vllm_kimi_eagle.tools.engines.engine_process import stop_session

        stop_session(self.process.pid)
        self.process.wait()


if __name__ == "__main__":
    serve()
