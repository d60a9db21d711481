"""A local HTTP endpoint that speaks the part of the Hugging Face Hub protocol that
huggingface_hub (and so vLLM and the plugin's tools) use to read a model: repository
info, file listings, file metadata (HEAD) and downloads with byte ranges. Point
``HF_ENDPOINT`` at ``HubEndpoint.url`` and a folder served as ``ORG/NAME`` is read through
the real client, as a hub id is.

Faults on purpose, for the tests of what a user meets online: ``hang`` seconds before
every answer, and ``failures`` (a file name -> how many of its next downloads answer 500).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubEndpoint:
    """Serves ``repos`` (hub id -> local folder) on 127.0.0.1 while in a ``with`` block."""

    def __init__(self, repos: dict[str, str], hang: float = 0.0):
        self.repos = dict(repos)
        self.hang = hang
        self.failures: dict[str, int] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "HubEndpoint":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def files(self, repo: str) -> list[str]:
        folder = self.repos[repo]
        return sorted(os.path.relpath(os.path.join(root, name), folder)
                      for root, _, names in os.walk(folder) for name in names)


def _etag(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


REPO = r"(?P<repo>[^/]+/[^/]+)"
ROUTES = (
    ("info", re.compile(rf"^/api/models/{REPO}(?:/revision/(?P<rev>[^/]+))?$")),
    ("tree", re.compile(rf"^/api/models/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")),
    ("file", re.compile(rf"^/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")),
)


def _handler(hub: HubEndpoint):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, head: bool) -> None:
            path = unquote(urlparse(self.path).path)
            hub.requests.append((self.command, path))
            if hub.hang:
                time.sleep(hub.hang)
            for kind, pattern in ROUTES:
                found = pattern.match(path)
                if found:
                    break
            else:
                return self._send(404, b'{"error": "not found"}', head=head)
            repo = found.group("repo")
            if repo not in hub.repos:
                return self._send(404, json.dumps({"error": f"Repository {repo} not found"})
                                  .encode(), head=head, error_code="RepoNotFound")
            if kind == "info":
                return self._json({"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                                   "siblings": [{"rfilename": f} for f in hub.files(repo)]},
                                  head)
            if kind == "tree":
                prefix = found.group("path") or ""
                entries = [{"type": "file", "path": f, "oid": COMMIT,
                            "size": os.path.getsize(os.path.join(hub.repos[repo], f))}
                           for f in hub.files(repo) if f.startswith(prefix)]
                return self._json(entries, head)
            return self._file(repo, found.group("path"), head)

        def _json(self, value, head: bool) -> None:
            self._send(200, json.dumps(value).encode(), head=head,
                       headers={"Content-Type": "application/json"})

        def _file(self, repo: str, name: str, head: bool) -> None:
            path = os.path.join(hub.repos[repo], name)
            if not os.path.isfile(path):
                return self._send(404, b'{"error": "Entry not found"}', head=head,
                                  error_code="EntryNotFound")
            if not head and hub.failures.get(name, 0) > 0:
                hub.failures[name] -= 1
                return self._send(500, b'{"error": "injected"}', head=False)
            size = os.path.getsize(path)
            start, end, status = 0, size - 1, 200
            wanted = re.match(r"bytes=(\d*)-(\d*)$", self.headers.get("Range", ""))
            if wanted:
                first, last = wanted.groups()
                if first == "":  # the last N bytes
                    start = max(0, size - int(last))
                else:
                    start, end = int(first), min(int(last), size - 1) if last else size - 1
                status = 206
            headers = {"ETag": f'"{_etag(path)}"', "X-Repo-Commit": COMMIT,
                       "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
            if status == 206:
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            if head:
                return self._send(200, b"", head=True, headers=headers, length=size)
            with open(path, "rb") as f:
                f.seek(start)
                body = f.read(end - start + 1)
            self._send(status, body, head=False, headers=headers)

        def _send(self, status: int, body: bytes, *, head: bool, headers: dict | None = None,
                  error_code: str | None = None, length: int | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if error_code:
                self.send_header("X-Error-Code", error_code)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            if not head:
                self.wfile.write(body)

    return Handler
