"""The prompts ``calibrate`` measures on: a file of the user's, the tiny corpus for the
tiny models, or a small built-in mix of chat, code and maths for real ones."""

from __future__ import annotations

import json
import os

from vllm_kimi_eagle.fixtures.cache import BUILT
from vllm_kimi_eagle.tools.calibrate.candidates import CalibrationError

BUILT_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "prompts.jsonl")


def is_tiny_target(target: str) -> bool:
    """A target of the tiny models: its config.json sits in a build-tiny models folder,
    links followed, so that the tiny target reached through a Hugging Face cache is
    calibrated as its folder is."""
    config = os.path.realpath(os.path.join(target, "config.json"))
    return os.path.exists(os.path.join(os.path.dirname(os.path.dirname(config)), BUILT))


def read_prompts(path: str) -> list[dict]:
    """A JSONL file: each line a string (plain text), {"prompt": str}, {"messages": [...]}
    or a list of chat messages. Errors name the file and the line."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise CalibrationError(f"--prompts {path}: cannot be read ({err})") from err
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            prompts.append(_prompt(json.loads(line)))
        except (ValueError, TypeError) as err:
            raise CalibrationError(
                f"--prompts {path}, line {number}: {err}. Each line must be a JSON string, "
                '{"prompt": "..."}, {"messages": [{"role": "user", "content": "..."}]} or a '
                "list of such messages.") from None
    if not prompts:
        raise CalibrationError(f"--prompts {path}: no prompt in the file")
    return prompts


def _prompt(value) -> dict:
    if isinstance(value, str):
        return {"prompt": value}
    if isinstance(value, list):
        value = {"messages": value}
    if isinstance(value, dict) and isinstance(value.get("prompt"), str):
        return {"prompt": value["prompt"]}
    messages = value.get("messages") if isinstance(value, dict) else None
    if (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m
            for m in messages)):
        return {"messages": messages}
    raise ValueError(f"not a prompt: {json.dumps(value)[:120]}")


def default_prompts(target: str, count: int) -> tuple[list[dict], str]:
    """(prompts, where they come from) when the user gives no file."""
    if is_tiny_target(target):
        from vllm_kimi_eagle.fixtures import corpus
        from vllm_kimi_eagle.fixtures.offline import CALIBRATE_SEED

        chats = [{"messages": [{"role": "user", "content": p}]}
                 for p in corpus.demo_prompts(count, seed=CALIBRATE_SEED)]
        return chats, "the tiny corpus (held-out instructions)"
    return read_prompts(BUILT_IN)[:count], f"the built-in mix ({BUILT_IN})"
