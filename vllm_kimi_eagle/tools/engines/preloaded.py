"""Starting a process as a fork of a preloaded vLLM process, where one is offered.

Importing vLLM is most of a small engine's start. The test suite keeps, per pytest worker,
one process that has imported vLLM and nothing of the plugin (tests/preloaded_vllm.py) and
names its socket in ``VLLM_KIMI_EAGLE_PRELOADED``; where that variable is set, the engines
and servers the tools start (``engine_process``, ``vllm_server``) are forks of it, each
then running ``python ARGV...`` as a fresh interpreter would. vLLM's own child processes
(a server's engine core and workers) are started by vLLM as always. Where no such process
is named, or it refuses (the request's environment differs from its own in a variable
read while vLLM is imported), ``popen`` returns None and the caller starts a fresh
interpreter.

The protocol, one connection per process: the client sends one JSON line (``argv``,
``env``, ``cwd``) with the process's stdin, stdout and stderr descriptors attached
(SCM_RIGHTS); the preloaded process answers ``{"pid": N}`` (or ``{"refused": why}``) and,
when the process has ended, ``{"exit": code}``. The process leads a session of its own.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time

ENV = "VLLM_KIMI_EAGLE_PRELOADED"
CONNECT_TIMEOUT = 60


class Forked:
    """A process forked by the preloaded vLLM, used as ``subprocess.Popen`` is: ``pid``,
    ``returncode``, ``stdin`` (with stdin=PIPE), ``poll()``, ``wait(timeout)``."""

    def __init__(self, connection: socket.socket, pid: int, stdin=None):
        self.pid = pid
        self.stdin = stdin
        self.returncode: int | None = None
        self._connection = connection
        self._buffer = b""

    def _read(self, timeout: float | None) -> bool:
        """Read what the preloaded process said within ``timeout``; whether it said the
        process ended (or closed the connection, which counts as a kill)."""
        if self.returncode is not None:
            return True
        if b"\n" not in self._buffer:
            ready = select.select([self._connection], [], [], timeout)[0]
            if not ready:
                return False
            chunk = self._connection.recv(4096)
            if not chunk:
                self._ended(-9)
                return True
            self._buffer += chunk
        if b"\n" in self._buffer:
            self._ended(json.loads(self._buffer.split(b"\n", 1)[0])["exit"])
        return self.returncode is not None

    def _ended(self, code: int) -> None:
        self.returncode = code
        self._connection.close()

    def poll(self) -> int | None:
        while self.returncode is None and self._read(0):
            pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            self._read(left)
        return self.returncode


def _descriptor(stream, stdout_fd: int | None) -> int:
    if stream is None:
        return os.open(os.devnull, os.O_RDWR)
    if stream == subprocess.STDOUT:
        return os.dup(stdout_fd)
    return os.dup(stream if isinstance(stream, int) else stream.fileno())


def popen(argv: list[str], env: dict, *, stdin=None, stdout=None, stderr=None,
          text: bool = False, cwd: str | None = None,
          socket_path: str | None = None) -> Forked | None:
    """``python ARGV...`` with ``env``, forked from the preloaded vLLM at ``socket_path``
    (by default the one ``env`` names: ENV), with these streams (as subprocess.Popen takes
    them: None, a file, a descriptor, subprocess.PIPE for stdin, subprocess.STDOUT for
    stderr); None where none is named or it refuses this environment."""
    path = socket_path or env.get(ENV)
    if not path:
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(CONNECT_TIMEOUT)
    try:
        connection.connect(path)
    except OSError:
        connection.close()
        return None
    writer = None
    if stdin == subprocess.PIPE:
        read_end, write_end = os.pipe()
        writer = os.fdopen(write_end, "w" if text else "wb")
        stdin_fd = read_end
    else:
        stdin_fd = _descriptor(stdin, None)
    out_fd = _descriptor(stdout, None)
    err_fd = _descriptor(stderr, out_fd)
    request = {"argv": list(argv), "env": dict(env), "cwd": cwd or os.getcwd()}
    try:
        socket.send_fds(connection, [json.dumps(request).encode() + b"\n"],
                        [stdin_fd, out_fd, err_fd])
        answer = b""
        while b"\n" not in answer:
            chunk = connection.recv(4096)
            if not chunk:
                raise OSError("the preloaded vLLM process closed the connection")
            answer += chunk
    except OSError:
        connection.close()
        if writer is not None:
            writer.close()
        return None
    finally:
        for fd in (stdin_fd, out_fd, err_fd):
            os.close(fd)
    line, rest = answer.split(b"\n", 1)
    reply = json.loads(line)
    if "pid" not in reply:
        connection.close()
        if writer is not None:
            writer.close()
        return None
    connection.settimeout(None)
    forked = Forked(connection, reply["pid"], writer)
    forked._buffer = rest
    return forked


def start(command: list[str], env: dict | None = None, **streams):
    """``command`` (``[python, ARGS...]``) forked from the preloaded vLLM where the
    environment names one and it takes this one, else ``subprocess.Popen`` in a session of
    its own; ``streams``: stdin, stdout, stderr, text as Popen takes them."""
    full = os.environ if env is None else env
    forked = popen(command[1:], full, **streams) if command[0] == sys.executable else None
    if forked is not None:
        return forked
    return subprocess.Popen(command, env=env, start_new_session=True, **streams)


def run(command: list[str], env: dict | None = None, timeout: float | None = None,
        **streams) -> int:
    """``start`` and wait: the exit code, as ``subprocess.run(...).returncode``. Past
    ``timeout`` the process's session is stopped and subprocess.TimeoutExpired raised."""
    import signal

    process = start(command, env, **streams)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        raise
