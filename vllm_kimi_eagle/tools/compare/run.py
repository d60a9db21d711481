"""The servers of ``compare``, one after another, and what each answered."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from vllm_kimi_eagle.tools.compare.traffic import Request, body
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.figures import request_metrics, spec_metrics
from vllm_kimi_eagle.tools.figures.progress import bar, say

NO_DRAFT = "no-draft"


@dataclass(frozen=True)
class Setting:
    """One way to serve the target: a speculative config (None: no draft) and the
    environment variables it differs by (e.g. VLLM_KIMI_EAGLE_LAYER_IDS); or a server
    already running at ``url`` (``--url``), served as its operator started it."""
    name: str
    speculative: dict | None
    env: dict = field(default_factory=dict)
    url: str | None = None


def variants(requests: list[Request], raw: bool) -> list[str]:
    """"sent": each request as the user sends it; "raw": chat requests' text again,
    without the chat template (with --raw)."""
    has_chat = any(r.messages is not None for r in requests)
    return ["sent", "raw"] if raw and has_chat else ["sent"]


def too_long(server: vllm_server.Server, path: str, payload: dict, max_model_len: int
             ) -> str | None:
    """Why the server cannot hold this request's prompt and its max_tokens, if it cannot
    (its prompt as the server tokenizes it, the chat template applied)."""
    if path.endswith("/chat/completions"):
        body = {"model": payload["model"], "messages": payload["messages"],
                "add_generation_prompt": True}
    else:
        body = {"model": payload["model"], "prompt": payload["prompt"]}
    prompt = int(server.post("/tokenize", body)["count"])
    wanted = payload.get("max_tokens")
    if isinstance(wanted, int) and prompt + wanted > max_model_len:
        return (f"not sent: its prompt is {prompt} tokens and it asks for {wanted} more, "
                f"beyond the server's max_model_len {max_model_len} (serve with "
                f"--server-arg=--max-model-len={prompt + wanted}, or lower its max_tokens)")
    return None


def send_all(server: vllm_server.Server, model: str, requests: list[Request], raw: bool,
             max_tokens: int, concurrency: int, label: str) -> dict:
    """Every request once, ``concurrency`` at a time, between two /metrics scrapes. A
    request that fails (an HTTP error, a timeout) or would not fit the server's context is
    recorded with its id and the reason, and the run goes on."""
    chosen = [r for r in requests if not raw or r.messages is not None]
    max_model_len = server.max_model_len(model)

    def one(request: Request) -> dict:
        path, payload = body(request, model, raw, max_tokens)
        record = {"id": request.id, "greedy": request.greedy, "text": None,
                  "output_tokens": 0, "acceptance": None}
        try:
            reason = too_long(server, path, payload, max_model_len)
            if reason:
                return dict(record, error=reason)
            answer = server.post(path, payload)
        except (vllm_server.ServerError, OSError, ValueError) as err:
            return dict(record, error=str(err)[:600])
        choice = answer["choices"][0]
        acceptance = request_metrics.from_response(answer)
        return dict(record, text=choice.get("text", (choice.get("message") or {}).get("content")),
                    output_tokens=answer["usage"]["completion_tokens"],
                    prompt_tokens=answer["usage"].get("prompt_tokens"),
                    acceptance=None if acceptance is None else acceptance.as_dict())

    before = server.scrape()
    started = time.perf_counter()
    answered = []
    progress = bar(len(chosen), f"[{label}] requests", "request")
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for result in pool.map(one, chosen):
            answered.append(result)
            progress.update()
    progress.close()
    seconds = time.perf_counter() - started
    window = server.scrape() - before
    tokens = sum(r["output_tokens"] for r in answered)
    return {"requests": answered, "seconds": round(seconds, 3),
            "output_tokens": tokens, "tokens_per_s": round(tokens / seconds, 2),
            "window": spec_metrics.spec_counters(window).summary()}


@contextmanager
def started(setting: Setting, target: str, args, out: str, version):
    """A setting's server, up; yields (server, its record so far). A running server
    (``setting.url``) is used as it is: what it speculates with is read off its /metrics."""
    if setting.url is not None:
        server = vllm_server.Server(setting.url.rstrip("/"), log_path="")
        say(f"[{setting.name}] the server at {setting.url}")
        scrape = server.scrape()
        record = {"speculative_config": ({"server": setting.url}
                                         if spec_metrics.has_spec_counters(scrape) else None),
                  "env": {}, "server_args": [], "url": setting.url, "variants": {}}
        yield server, record
        return
    speculative = setting.speculative is not None
    extra = vllm_server.server_args(args.server_arg)
    extra += request_metrics.server_args(speculative, version)
    log = os.path.join(out, f"server-{setting.name}.log")
    say(f"[{setting.name}] starting vLLM for {target} (log: {log})")
    record = {"speculative_config": setting.speculative, "env": setting.env,
              "server_args": extra, "variants": {}}
    env = {**vllm_server.default_env(), **setting.env}
    with vllm_server.running_server(target, log, setting.speculative, extra, env=env,
                                    startup_timeout=args.startup_timeout) as server:
        yield server, record


def send_variants(server: vllm_server.Server, record: dict, name: str,
                  requests: list[Request], args) -> dict:
    # Each variant keeps its first round's answers; round_tokens_per_s collects every
    # round's speed (send_round adds the others).
    """A short warm-up request outside every window (not one of the traffic's, which may
    be one the server refuses), then each variant of the traffic."""
    model = server.model_name()
    server.post("/v1/completions", {"model": model, "prompt": "hello", "max_tokens": 8,
                                    "temperature": 0.0})
    for variant in variants(requests, args.raw):
        record["variants"][variant] = sent = send_all(
            server, model, requests, variant == "raw", args.max_tokens, args.concurrency,
            f"{name}, {variant}")
        sent["round_tokens_per_s"] = [sent["tokens_per_s"]]
    return record


def measure_all(everyone: list[Setting], target: str, requests: list[Request], args,
                out: str, version) -> dict:
    """Every setting's record. One server at a time by default (each setting's speed is
    then one window at its own time); side by side, all are started at once and each is
    measured while the others are frozen (SIGSTOP), ``args.rounds`` times in alternating
    order."""
    runs = {}
    if not args.side_by_side:
        for number, setting in enumerate(everyone, 1):
            say(f"setting {number}/{len(everyone)}: {setting.name}")
            with started(setting, target, args, out, version) as (server, record):
                runs[setting.name] = send_variants(server, record, setting.name, requests,
                                                   args)
        return runs
    with ExitStack() as stack:
        live = [(s, *stack.enter_context(started(s, target, args, out, version)))
                for s in everyone]
        for number in range(args.rounds):
            shift = number % len(live)  # each round starts with another server
            for setting, server, record in live[shift:] + live[:shift]:
                for _, other, _ in live:
                    other.pause()
                server.resume()
                try:
                    if number == 0:
                        runs[setting.name] = send_variants(server, record, setting.name,
                                                           requests, args)
                    else:
                        send_round(server, record, setting.name, requests, args, number)
                finally:
                    for _, other, _ in live:
                        other.resume()
    return runs


def send_round(server: vllm_server.Server, record: dict, name: str, requests: list[Request],
               args, number: int) -> None:
    """One more round of every variant, for its tokens/s (the answers are the first
    round's)."""
    model = server.model_name()
    for variant in record["variants"]:
        again = send_all(server, model, requests, variant == "raw", args.max_tokens,
                         args.concurrency, f"{name}, {variant}, round {number + 1}")
        record["variants"][variant].setdefault("round_tokens_per_s", []).append(
            again["tokens_per_s"])


def parse_setting(text: str, envs: dict[str, dict]) -> Setting:
    """NAME=JSON (a speculative config) or NAME=none."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--config {text!r}: expected NAME=JSON (a speculative config, "
                         "e.g. base='{\"method\": \"eagle3\", \"model\": \"DRAFT\", "
                         "\"num_speculative_tokens\": 3}') or NAME=none")
    if value.strip().lower() == "none":
        return Setting(name, None, envs.get(name, {}))
    try:
        config = json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"--config {name}: not JSON ({err.msg} at column {err.colno}): "
                         f"{value!r}") from err
    if not isinstance(config, dict):
        raise ValueError(f"--config {name}: a speculative config is a JSON object, found "
                         f"{type(config).__name__}")
    return Setting(name, config, envs.get(name, {}))


def parse_envs(entries: list[str]) -> dict[str, dict]:
    """NAME:VAR=VALUE entries, by setting name."""
    envs: dict[str, dict] = {}
    for entry in entries:
        name, sep, assignment = entry.partition(":")
        var, eq, value = assignment.partition("=")
        if not (sep and eq and name and var):
            raise ValueError(f"--env {entry!r}: expected NAME:VAR=VALUE, e.g. "
                             "base:VLLM_KIMI_EAGLE_LAYER_IDS=output-of")
        envs.setdefault(name, {})[var] = value
    return envs


def running(urls: list[str]) -> list[Setting]:
    """--url NAME=URL entries: servers already running, one per setting; the one named
    no-draft, if any, is the reference the greedy answers and speedups are held to."""
    found = []
    for entry in urls:
        name, sep, url = entry.partition("=")
        if not (sep and name and url.startswith(("http://", "https://"))):
            raise ValueError(f"--url {entry!r}: expected NAME=URL, e.g. "
                             "k3=http://127.0.0.1:8000 (no-draft=URL for the server "
                             "without a draft)")
        found.append(Setting(name, None if name == NO_DRAFT else {"server": url}, url=url))
    names = [s.name for s in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--url names must be unique: {', '.join(twice)}")
    if len([s for s in found if s.name != NO_DRAFT]) < 1:
        raise ValueError("--url: give at least one server with a draft (NAME=URL)")
    return found


def settings(configs: list[str], drafts: list[str], k: int, env_entries: list[str]
             ) -> list[Setting]:
    """The settings compared, in the order given: --draft PATH (eagle3 at k, named by
    the folder) and --config NAME=JSON; names are unique."""
    envs = parse_envs(env_entries)
    chosen = [Setting(os.path.basename(os.path.normpath(d)),
                      {"method": "eagle3", "model": d, "num_speculative_tokens": k},
                      envs.get(os.path.basename(os.path.normpath(d)), {})) for d in drafts]
    chosen += [parse_setting(c, envs) for c in configs]
    names = [s.name for s in chosen]
    twice = sorted({n for n in names if names.count(n) > 1} | ({NO_DRAFT} & set(names)))
    if twice:
        raise ValueError(f"setting names must be unique and not {NO_DRAFT!r} (the server "
                         f"without a draft every run starts): {', '.join(twice)}; name "
                         "them with --config NAME=JSON")
    unknown = sorted(set(envs) - set(names))
    if unknown:
        raise ValueError(f"--env names no setting: {', '.join(unknown)} (settings: "
                         f"{', '.join(names)})")
    if not chosen:
        raise ValueError("nothing to compare: give --draft PATH or --config NAME=JSON, once "
                         "or more")
    return chosen
