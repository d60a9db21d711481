"""``vllm-kimi-eagle eval``: the command line (see the package docstring)."""

from __future__ import annotations

import argparse
import os
import sys

from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.evaluation import __doc__ as DESCRIPTION
from vllm_kimi_eagle.tools.evaluation import tasks
from vllm_kimi_eagle.tools.evaluation.measure import measured_run, server_for
from vllm_kimi_eagle.tools.evaluation.report import compare, write_report
from vllm_kimi_eagle.tools.evaluation.tasks import (
    DEFAULT_TASK,
    TINY_TASK,
    EvalError,
    refusal,
    task_output_types,
)
from vllm_kimi_eagle.tools.figures.progress import say
from vllm_kimi_eagle.tools.models import model_source


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm-kimi-eagle eval", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="target model (path or hub id) to serve")
    p.add_argument("--draft", help="draft model to serve with it")
    p.add_argument("--base-url", help="URL of a running server WITHOUT speculation")
    p.add_argument("--spec-url", help="URL of a running server WITH the draft")
    p.add_argument("--task", default=DEFAULT_TASK,
                   help=f"an lm-eval task that generates (default {DEFAULT_TASK}; offline: "
                        f"{TINY_TASK}, from the project's eval/tasks)")
    p.add_argument("--include-path", action="append", default=[],
                   help="a folder of your own lm-eval task YAMLs (repeatable), as lm-eval's "
                        "--include_path; the project's eval/tasks are always included")
    p.add_argument("--model-type", default="local-chat-completions",
                   choices=["local-chat-completions", "local-completions"])
    p.add_argument("--tokenizer", help="tokenizer for local-completions (default: target)")
    p.add_argument("--limit", type=float, default=None, help="samples (or fraction)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--num-speculative-tokens", type=int, default=3)
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra argument for started servers (repeatable), e.g. "
                        "--server-arg=--tensor-parallel-size=8; the command itself adds "
                        f"only {' '.join(vllm_server.server_args([]))}, unless you give that flag")
    p.add_argument("--startup-timeout", type=float, default=vllm_server.DEFAULT_STARTUP_TIMEOUT,
                   help="seconds a started server may take to become healthy "
                        f"(default {vllm_server.DEFAULT_STARTUP_TIMEOUT})")
    p.add_argument("--out", default="out/eval")
    args = p.parse_args(argv)
    for url, role in ((args.base_url, "--base-url"), (args.spec_url, "--spec-url")):
        if not url and not args.target:
            p.error(f"give --target (and --draft) so that servers are started here, or "
                    f"{role} of a running server")
    if not args.spec_url and not args.draft:
        p.error("give --draft (the server with speculation is started here) or --spec-url")
    if args.limit is not None and args.limit >= 1:
        args.limit = int(args.limit)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.target:
        args.target = model_source.local_folder(args.target, "--target")
    if args.draft:
        args.draft = model_source.local_folder(args.draft, "--draft")
    args.tokenizer = args.tokenizer or args.target
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    try:
        say(f"reading lm-eval's task index for {args.task} ...")
        task_manager = tasks.task_manager(args.include_path)
        reason = refusal(args.task, task_output_types(task_manager, args.task))
        if reason:
            raise EvalError(reason)
        runs = {}
        for label, url, speculative in (("without_draft", args.base_url, False),
                                         ("with_draft", args.spec_url, True)):
            run: dict = {}
            with server_for(args, label, url, speculative, out, run) as server:
                run.update(measured_run(server, label, speculative, args, task_manager))
            runs[label] = run
    except (EvalError, vllm_server.ServerError) as err:
        print(f"vllm-kimi-eagle eval: {err}", file=sys.stderr)
        return 2
    report = {
        "task": args.task, "target": args.target or args.base_url,
        "draft": args.draft or args.spec_url, "model_type": args.model_type,
        "limit": args.limit, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        **runs, "comparison": compare(runs["without_draft"], runs["with_draft"]),
    }
    paths = write_report(report, out)
    with open(paths[1]) as f:
        print(f.read())
    print(f"wrote {', '.join(paths)}")
    return 0
