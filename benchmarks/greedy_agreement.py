"""Print how often greedy answers with the draft are the no-draft server's, in one dtype, next
to the control that sets the level: how often the no-draft server's own greedy answers change
when only the batch changes.

    .venv/bin/python benchmarks/greedy_agreement.py [--dtype bfloat16] [--prompts 24]
        [--max-tokens 64] [--concurrency 16] [--target target --draft draft]

Serves the tiny target (vLLM's default MLA backend for the CPU and dtype: AMX_MLA in
bfloat16 on a CPU with AMX) twice, without and with the draft, and sends each the same
greedy chat requests one at a time and then ``--concurrency`` at a time. Prompts: the
demo's (the target's own kind of text) and the questions of the GPQA-format eval task
(far from its training text, where its top choices are close). In float32 speculation
changes no token; in bfloat16 a near-tie can flip whenever the batch changes shape, with
or without a draft. So the figures are:

- draft vs none at the same concurrency: what speculation changes;
- none at concurrency N vs none alone, and draft at N vs draft alone: what the batch alone
  changes (the level the dtype allows).

A figure, not a test (docs/measurements.md).
"""

import argparse
import json
import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from vllm_kimi_eagle.fixtures import corpus
from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.evaluation import tasks

NONE, DRAFT = "none", "draft"


def gpqa_prompts(count: int) -> list[str]:
    """The eval task's questions as its zero-shot chain-of-thought prompt asks them, each
    with its choices in two orders."""
    with open(tasks.tiny_data()) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    found = []
    for shift in (0, 1):
        for row in rows:
            choices = [row["Correct Answer"]] + [row[f"Incorrect Answer {i}"] for i in (1, 2, 3)]
            choices = choices[shift:] + choices[:shift]
            listed = "\n".join(f"({letter}) {choice}" for letter, choice in zip("ABCD", choices))
            found.append(f"What is the correct answer to this question: {row['Question']}\n"
                         f"Choices:\n{listed}\nLet's think step by step: ")
    return found[:count]


def prompts(count: int) -> dict[str, list[str]]:
    return {"demo": corpus.demo_prompts(count), "gpqa": gpqa_prompts(count)}


def answer(server, model: str, prompt: str, max_tokens: int) -> list[int]:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}],
            "temperature": 0.0, "max_tokens": max_tokens, "ignore_eos": True,
            "return_token_ids": True}
    return server.post("/v1/chat/completions", body)["choices"][0]["token_ids"]


def answers(server, prompt_list: list[str], max_tokens: int, concurrency: int) -> list[list[int]]:
    model = server.model_name()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(lambda p: answer(server, model, p, max_tokens), prompt_list))


def agreement(ours: list[list[int]], theirs: list[list[int]]) -> dict:
    """Identical answers, and where the others first differ (token index)."""
    firsts = [next(i for i, (a, b) in enumerate(zip(x, y)) if a != b)
              for x, y in zip(ours, theirs) if x != y]
    return {"identical": len(ours) - len(firsts), "of": len(ours),
            "first_difference_median": statistics.median(firsts) if firsts else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--prompts", type=int, default=24, help="per prompt set")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--target", default="target")
    p.add_argument("--draft", default="draft")
    p.add_argument("--draft-env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment of the draft server only, e.g. "
                        "VLLM_KIMI_EAGLE_CPU_MLA_VERIFY=0 (repeatable)")
    p.add_argument("--out", default="out/greedy-agreement")
    args = p.parse_args()
    folder = ensure_tiny_models()
    target, draft = os.path.join(folder, args.target), os.path.join(folder, args.draft)
    server_args = ["--dtype", args.dtype, "--enforce-eager", "--max-model-len", "1024",
                   "--seed", "0"]
    spec = {"method": "eagle3", "model": draft, "num_speculative_tokens": args.k}
    sets = prompts(args.prompts)
    got: dict = {}
    with ExitStack() as stack:
        draft_env = dict(item.split("=", 1) for item in args.draft_env)
        servers = {name: stack.enter_context(vllm_server.running_server(
            target, os.path.join(args.out, f"server-{name}.log"), speculative, server_args,
            env={**vllm_server.default_env(), **env}))
            for name, speculative, env in ((NONE, None, {}), (DRAFT, spec, draft_env))}
        before = servers[DRAFT].spec_counters()
        for name, server in servers.items():
            for set_name, prompt_list in sets.items():
                for concurrency in (1, args.concurrency):
                    got[name, set_name, concurrency] = answers(server, prompt_list,
                                                               args.max_tokens, concurrency)
        counters = (servers[DRAFT].spec_counters() - before).summary()
        backends = {name: vllm_server.logged_backends(server.log_path)
                    for name, server in servers.items()}
    print(f"dtype {args.dtype}; attention backends {backends}; draft server env {draft_env}; k={args.k}; "
          f"{args.max_tokens} greedy tokens per answer; acceptance length "
          f"{counters['acceptance_length']} ({counters['drafts']} drafts)")
    rows = []
    for set_name in sets:
        for what, a, b in (
                ("draft vs none, one at a time", (DRAFT, 1), (NONE, 1)),
                (f"draft vs none, {args.concurrency} at a time",
                 (DRAFT, args.concurrency), (NONE, args.concurrency)),
                (f"control: none {args.concurrency} at a time vs none alone",
                 (NONE, args.concurrency), (NONE, 1)),
                (f"control: draft {args.concurrency} at a time vs draft alone",
                 (DRAFT, args.concurrency), (DRAFT, 1))):
            found = agreement(got[a[0], set_name, a[1]], got[b[0], set_name, b[1]])
            rows.append({"prompts": set_name, "comparison": what, **found})
            print(f"  {set_name:5} {what:48} identical {found['identical']}/{found['of']}"
                  + (f", first difference at token {found['first_difference_median']} "
                     "(median)" if found["first_difference_median"] is not None else ""))
    print(json.dumps({"dtype": args.dtype, "draft_env": draft_env,
                      "acceptance_length": counters["acceptance_length"],
                      "backends": backends, "rows": rows}))


if __name__ == "__main__":
    main()
