"""``calibrate``'s engines (``engines.py``) in processes of their own, and its capture: the
target's greedy sequences and their hidden states, kept on disk with a manifest, reused
while the target, token budget, engine arguments and layers are the same, and extended
prompt by prompt as ``calibrate`` asks for more (one start of the target per run)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time

from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_ENV
from vllm_kimi_eagle.draft.rope_override import ROPE_THETA_ENV
from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError
from vllm_kimi_eagle.tools.engines import engine_process
from vllm_kimi_eagle.tools.figures.progress import say

ENGINE_TIMEOUT_S = 7200
MANIFEST_FORMAT = 2  # bump when what a capture keeps changes: older captures are redone
ENGINES = "vllm_kimi_eagle.tools.calibrate.engines"


def engine_env() -> dict:
    """The engines' environment: the user's, without the plugin's reading overrides (each
    candidate is set explicitly), with the CPU build's KV cache default."""
    from vllm_kimi_eagle.tools.engines import vllm_server

    env = {k: v for k, v in os.environ.items() if k not in (CONVENTION_ENV, ROPE_THETA_ENV)}
    env.update(vllm_server.default_env(env))
    return env


def checked(result: dict, what: str) -> dict:
    if "error" in result:
        raise CalibrationError(engine_process.failure_text(f"the {what} engine", result))
    return result


def run_engine(mode: str, spec: dict, log_path: str, env: dict | None = None) -> dict:
    """One engine run (``serve``) in its own process, with ``env`` added to the engines'
    environment; its result, or an error with the log."""
    command = [sys.executable, "-m", ENGINES, mode, json.dumps(spec)]
    return checked(engine_process.run(command, log_path, {**engine_env(), **(env or {})},
                                      ENGINE_TIMEOUT_S), mode)


def target_files(target: str) -> list[str]:
    """The target's config and weights, links followed: one identity for a folder and the
    same files reached through the Hugging Face cache."""
    names = [os.path.join(target, "config.json"), *checkpoint.checkpoint_files(target)]
    return sorted(os.path.realpath(name) for name in names)


def capture_key(target: str, max_tokens: int, engine_args: dict) -> str:
    text = json.dumps([MANIFEST_FORMAT, target_files(target), max_tokens, engine_args],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def prompt_key(prompt: dict) -> str:
    return json.dumps(prompt, sort_keys=True)


class CaptureStore:
    """The capture in ``folder`` for one target, token budget, engine arguments and set of
    layers: ``requests(prompts)`` returns the captured request of each prompt, capturing
    the ones not on disk yet with an engine started on first need and kept for the run."""

    def __init__(self, folder: str, target: str, layers: list[int], max_tokens: int,
                 engine_args: dict):
        self.folder, self.target, self.max_tokens = folder, target, max_tokens
        self.engine_args = engine_args
        self.path = os.path.join(folder, "manifest.json")
        self.manifest = self._reusable(capture_key(target, max_tokens, engine_args), layers)
        self.layers = self.manifest["layers"]
        self.session: engine_process.Session | None = None

    def _reusable(self, key: str, layers: list[int]) -> dict:
        if os.path.exists(self.path):
            with open(self.path) as f:
                manifest = json.load(f)
            if manifest.get("key") == key and set(layers) <= set(manifest["layers"]):
                say(f"capture: reusing {self.folder} ({len(manifest['requests'])} prompts, "
                    f"layers {manifest['layers']})")
                return manifest
        if os.path.isdir(self.folder) and os.listdir(self.folder) and not os.path.exists(self.path):
            raise CalibrationError(f"--capture {self.folder}: the folder is not empty and holds "
                                   "no capture of calibrate (no manifest.json); give a new or "
                                   "empty folder")
        shutil.rmtree(self.folder, ignore_errors=True)  # an older capture of calibrate's own
        os.makedirs(self.folder)
        return {"key": key, "layers": layers, "target": self.target,
                "max_tokens": self.max_tokens, "requests": [], "start_s": None,
                "seconds": 0.0}

    def requests(self, prompts: list[dict]) -> list[dict]:
        """The captured request of each prompt (captured now where missing)."""
        have = {prompt_key(r["prompt"]): r for r in self.manifest["requests"]}
        missing = [p for p in prompts if prompt_key(p) not in have]
        if missing:
            for request in self._capture(missing):
                have[prompt_key(request["prompt"])] = request
        return [have[prompt_key(p)] for p in prompts]

    def _capture(self, prompts: list[dict]) -> list[dict]:
        started = time.perf_counter()
        if self.session is None:
            say(f"capture: starting the target, keeping the inputs of layers {self.layers} "
                f"(log {self.folder}/engine.log) ...")
            spec = {"target": self.target, "layers": self.layers, "out": self.folder,
                    "engine_args": self.engine_args}
            self.session = engine_process.Session(
                [sys.executable, "-m", ENGINES, "capture", json.dumps(spec)],
                os.path.join(self.folder, "engine.log"), engine_env())
            self.manifest["start_s"] = checked(
                self.session.next_result(ENGINE_TIMEOUT_S), "capture")["start_s"]
            say(f"capture: target started in {self.manifest['start_s']} s")
        result = checked(self.session.request({"prompts": prompts, "max_tokens": self.max_tokens},
                                              ENGINE_TIMEOUT_S), "capture")
        captured = [dict(file, prompt=prompt) for file, prompt in zip(result["files"], prompts)]
        self.manifest["requests"] += captured
        self.manifest["seconds"] = round(self.manifest["seconds"]
                                         + time.perf_counter() - started, 1)
        with open(self.path, "w") as f:
            json.dump(self.manifest, f, indent=1)
        say(f"capture: {len(prompts)} more prompts x {self.max_tokens} greedy tokens in "
            f"{result['generate_s']} s")
        return captured

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def __enter__(self) -> "CaptureStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
