"""Starting ``calibrate``'s engines (``engines.py``) in processes of their own, and the
capture: one start of the target, kept on disk with a manifest and reused while the
target, prompts, token budget and engine arguments are the same."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

from vllm_kimi_eagle.layer_ids import CONVENTION_ENV
from vllm_kimi_eagle.rope_override import ROPE_THETA_ENV
from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError
from vllm_kimi_eagle.tools.calibrate.engines import RESULT_PREFIX
from vllm_kimi_eagle.tools.progress import say

ENGINE_TIMEOUT_S = 7200
MANIFEST_FORMAT = 1  # bump when what a capture keeps changes: older captures are redone


def run_engine(mode: str, spec: dict, log_path: str) -> dict:
    """One engine in its own process (engines.py); its result, or an error with the log."""
    from vllm_kimi_eagle.tools import vllm_server

    env = {k: v for k, v in os.environ.items() if k not in (CONVENTION_ENV, ROPE_THETA_ENV)}
    env.update(vllm_server.default_env(env))
    with open(log_path, "w") as log:
        subprocess.run([sys.executable, "-m", "vllm_kimi_eagle.tools.calibrate.engines", mode,
                        json.dumps(spec)], env=env, stdout=log, stderr=subprocess.STDOUT,
                       timeout=ENGINE_TIMEOUT_S, check=False)
    with open(log_path, errors="replace") as f:
        text = f.read()
    lines = [line for line in text.splitlines() if line.startswith(RESULT_PREFIX)]
    result = json.loads(lines[-1][len(RESULT_PREFIX):]) if lines else {"error": "no result"}
    if "error" in result:
        tail = "\n".join(text.splitlines()[-25:])
        raise CalibrationError(f"the {mode} engine failed: {result['error']}\nlog {log_path} "
                               f"ends with:\n{tail}")
    return result


def capture_key(target: str, prompts: list[dict], max_tokens: int, engine_args: dict) -> str:
    text = json.dumps([MANIFEST_FORMAT, os.path.abspath(target), prompts, max_tokens,
                       engine_args], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure_capture(folder: str, target: str, layers: list[int], prompts: list[dict],
                   max_tokens: int, engine_args: dict) -> dict:
    """The capture's manifest: reused when one in ``folder`` holds these prompts and layers,
    else one engine start of the target with vLLM's extract_hidden_states."""
    key = capture_key(target, prompts, max_tokens, engine_args)
    manifest_path = os.path.join(folder, "manifest.json")
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        if manifest.get("key") == key and set(layers) <= set(manifest["layers"]):
            say(f"capture: reusing {folder} (layers {manifest['layers']})")
            return manifest
    if os.path.isdir(folder) and os.listdir(folder) and not os.path.exists(manifest_path):
        raise CalibrationError(f"--capture {folder}: the folder is not empty and holds no "
                               "capture of calibrate (no manifest.json); give a new or empty "
                               "folder")
    shutil.rmtree(folder, ignore_errors=True)  # an older capture of calibrate's own
    os.makedirs(folder)
    say(f"capture: one start of the target, keeping the inputs of layers {layers} for "
        f"{len(prompts)} prompts x {max_tokens} greedy tokens (log {folder}/engine.log) ...")
    started = time.perf_counter()
    result = run_engine("capture", {"target": target, "layers": layers, "prompts": prompts,
                                    "max_tokens": max_tokens, "out": folder,
                                    "engine_args": engine_args},
                        os.path.join(folder, "engine.log"))
    manifest = {"key": key, "layers": layers, "target": target, "max_tokens": max_tokens,
                "requests": result["files"], "start_s": result["start_s"],
                "generate_s": result["generate_s"],
                "seconds": round(time.perf_counter() - started, 1)}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    say(f"capture: done in {manifest['seconds']} s (engine start {result['start_s']} s)")
    return manifest
