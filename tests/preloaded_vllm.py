"""Engines, servers and test children forked from a process that has imported vLLM already.

Importing vLLM is most of a small engine's start, and the suite starts dozens of them
(docs/measurements.md, "The test suite's time"). Each pytest worker keeps one process that has
imported vLLM (the offline engine and the OpenAI server's modules) and nothing else: no
plugin imported, vLLM's plugins not loaded, no engine, vLLM's environment cache off (it
refuses to serve otherwise), what was imported frozen for the collector. It serves on a
UNIX socket, which tests/helpers.py names in VLLM_KIMI_EAGLE_PRELOADED for every child:
an engine run, a test's ``python -c``/``-m`` child, and the engines and servers the tools
start (vllm_kimi_eagle/tools/engines/preloaded.py, the client and the protocol) are forks
of it that take the request's environment, working folder, arguments and standard streams,
then run them as ``python ARGS`` would, in a session of their own. Several run at once.
vLLM starts its own engine core and workers from such a process as from any other.

A variable read while vLLM is imported (huggingface_hub's HF_ENDPOINT, vLLM's logging
level, ...) cannot change after the fork, so a request whose environment differs from the
preloaded process's in any variable that is not read later (``LATE_READ``) is refused,
and its caller starts a fresh interpreter instead (``served_by_fork``).

    python tests/preloaded_vllm.py SOCKET   # the preloaded process
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

# Read by the plugin, the test scripts and vLLM's plugin loader when an engine starts,
# never while vLLM is imported: a fork may take new values of these.
LATE_READ_PREFIXES = ("VLLM_KIMI_EAGLE_", "KIMI_EAGLE_TEST_")
LATE_READ = ("VLLM_PLUGINS", "PYTEST_CURRENT_TEST", "VLLM_CPU_KVCACHE_SPACE",
             "TOKENIZERS_PARALLELISM",
             # What a shell sets for the commands it runs (a docs block run as written).
             "PWD", "OLDPWD", "SHLVL", "_")
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


def _child(request: dict, fds: list[int], set_by_import: dict, others: list) -> None:
    """In the fork: become ``python ARGV...`` (a script, ``-c CODE`` or ``-m MODULE``, then
    its arguments) with the request's environment and standard streams."""
    code = 1
    try:
        for other in others:  # the preloaded process's alone
            other.close()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
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


# What every fork shares: vLLM's offline engine and its OpenAI server.
PRELOADED_MODULES = ("vllm.entrypoints.llm", "vllm.entrypoints.openai.api_server")
POLL_S = 0.1


def serve(socket_path: str) -> None:
    # What vLLM prints while it is imported (some releases log to stdout) goes to this
    # process's log with the rest of its output; stdout carries the ready line alone.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    started_with = dict(os.environ)
    import importlib

    for module in PRELOADED_MODULES:
        importlib.import_module(module)
    problem = _fresh_enough()
    if problem:
        raise SystemExit(f"preloaded vLLM: {problem}")
    # What was imported stays for good: a fork's full collections (vLLM's loader runs
    # several per model) then walk only what the fork made, not every imported object.
    gc.freeze()
    # What importing vLLM set: a fresh process with the request's environment would set
    # the same (served_by_fork), so each fork gets it too.
    set_by_import = {k: v for k, v in os.environ.items() if started_with.get(k) != v}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    replies.write(json.dumps({"ready": READY, "env": dict(os.environ)}) + "\n")
    replies.flush()
    waiting: list[socket.socket] = []  # connections whose request has not come yet
    running: dict[int, socket.socket] = {}  # pid -> its connection
    gone: set[int] = set()  # processes whose client went away (stopped, not yet reaped)
    parent = os.getppid()
    while os.getppid() == parent:  # the pytest worker that started it is alive
        watched = [c for p, c in running.items() if p not in gone]
        readable = select.select([listener, *waiting, *watched], [], [], POLL_S)[0]
        for connection in readable:
            if connection is listener:
                waiting.append(listener.accept()[0])
            elif connection in waiting:
                waiting.remove(connection)
                _answer(connection, started_with, set_by_import, running,
                        [listener, *waiting, *running.values()])
            else:  # a client went away while its process runs: that process goes too
                pid = next(p for p, c in running.items() if c is connection)
                _stop_session(pid)
                gone.add(pid)
        for pid in _reap(running):
            gone.discard(pid)
    for pid in running:  # what it started goes with it
        _stop_session(pid)


def _answer(connection, started_with: dict, set_by_import: dict, running: dict,
            others: list) -> None:
    """Fork for one request (or refuse it), and reply."""
    try:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        request = json.loads(message)
    except (OSError, ValueError):
        connection.close()
        return
    problem = _fresh_enough()
    if problem is None and not served_by_fork(request["env"], started_with,
                                              {**started_with, **set_by_import}):
        problem = "its environment differs in a variable read while vLLM is imported"
    if problem is not None or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        _send(connection, {"refused": problem or "three standard streams expected"})
        connection.close()
        return
    pid = os.fork()
    if pid == 0:
        _child(request, fds, set_by_import, [*others, connection])
    for fd in fds:
        os.close(fd)
    running[pid] = connection
    _send(connection, {"pid": pid})


def _send(connection, message: dict) -> None:
    try:
        connection.sendall((json.dumps(message) + "\n").encode())
    except OSError:
        pass


def _reap(running: dict) -> list[int]:
    """Tell each client whose process has ended its exit code; the pids reaped."""
    reaped = []
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        reaped.append(pid)
        connection = running.pop(pid, None)
        if connection is not None:
            _send(connection, {"exit": os.waitstatus_to_exitcode(status)})
            connection.close()
    return reaped


def _stop_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---- the pytest side ------------------------------------------------------------------
# (The plugin's modules are imported here only: the preloaded process must not load them.)

class Preloaded:
    """One preloaded process, serving on a socket of its own (``socket_path``)."""

    def __init__(self, env: dict, log_path: str):
        import tempfile

        self.env = dict(env)
        self._folder = tempfile.mkdtemp(prefix="vllm-kimi-eagle-preloaded-")
        self.socket_path = os.path.join(self._folder, "socket")
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), self.socket_path],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=self.env,
                start_new_session=True)
        ready = self._ready(START_TIMEOUT)
        if not ready or ready.get("ready") != READY:
            self.close()
            raise RuntimeError(f"the preloaded vLLM process did not start: {ready} "
                               f"(its log: {log_path})")
        self.after_import = ready["env"]

    def alive(self) -> bool:
        return self.process.poll() is None

    def _ready(self, timeout: float) -> dict | None:
        """The ready line, or None after ``timeout`` seconds or if the process ended."""
        out = self.process.stdout.fileno()
        buffer, deadline = b"", time.monotonic() + timeout
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
            chunk = os.read(out, 65536)
            if not chunk:
                return None
            buffer += chunk
        return json.loads(buffer.split(b"\n", 1)[0])

    def run(self, argv: list[str], env: dict, log_path: str, timeout: float,
            err_path: str | None = None) -> int | None:
        """Run ``argv`` (what follows ``python``) in a fork with ``env``, its output in
        ``log_path`` (its stderr in ``err_path`` if given); its exit code, or None when it
        ran past ``timeout`` (its session is then stopped). What the run left behind in
        its session is stopped either way."""
        from vllm_kimi_eagle.tools.engines import preloaded
        from vllm_kimi_eagle.tools.engines.engine_process import stop_session

        for path in {log_path, err_path or log_path}:
            open(path, "w").close()
        with open(log_path, "a") as out, open(err_path or os.devnull, "a") as err:
            forked = preloaded.popen(argv, env, stdout=out, socket_path=self.socket_path,
                                     stderr=err if err_path else subprocess.STDOUT)
        if forked is None:
            raise RuntimeError(f"the preloaded vLLM process did not fork (alive: "
                               f"{self.alive()})")
        try:
            exit_code = forked.wait(timeout)
        except subprocess.TimeoutExpired:
            exit_code = None
        stop_session(forked.pid)
        if exit_code is None:
            forked.wait(60)
        return exit_code

    def close(self) -> None:
        from vllm_kimi_eagle.tools.engines.engine_process import stop_session
        import shutil

        stop_session(self.process.pid)
        self.process.wait()
        shutil.rmtree(self._folder, ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1])
