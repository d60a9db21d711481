"""``vllm-kimi-eagle``: the plugin's command line."""

from __future__ import annotations

import argparse
import json
import sys


def _build_tiny(args) -> int:
    from vllm_kimi_eagle.fixtures import cache

    folder = cache.ensure_tiny_models(args.folder, progress=not args.quiet, force=args.force)
    print(json.dumps({"folder": folder, **cache.build_summary(folder)}))
    return 0


def _inspect(args) -> int:
    from vllm_kimi_eagle.tools.inspect_draft import format_report, inspect_draft

    report = inspect_draft(args.draft, args.target, revision=args.revision,
                           target_revision=args.target_revision)
    print(json.dumps(report) if args.json else format_report(report))
    return 1 if report["problems"] else 0


def _demo(args) -> int:
    from vllm_kimi_eagle.tools import demo

    return demo.main(args)


def main(argv: list[str] | None = None) -> int:
    """Run one command; a model that cannot be found is one line on stderr and exit 2, a
    vLLM server that fails is the engine's error and its log's tail, exit 1."""
    from vllm_kimi_eagle.tools.engines.vllm_server import ServerError
    from vllm_kimi_eagle.tools.models.model_source import ModelNotFound

    argv = sys.argv[1:] if argv is None else argv
    try:
        return run_command(argv)
    except ModelNotFound as err:
        print(f"vllm-kimi-eagle {argv[0] if argv else ''}: {err}", file=sys.stderr)
        return 2
    except ServerError as err:
        print(f"vllm-kimi-eagle {argv[0] if argv else ''}: {err}", file=sys.stderr)
        return 1


# Commands with their own options: module with parse_args(argv) and main(argv).
TOOL_MODULES = {
    "bench-sampler": "vllm_kimi_eagle.tools.bench_sampler",
    "bench-e2e": "vllm_kimi_eagle.tools.bench_e2e.cli",
    "calibrate": "vllm_kimi_eagle.tools.calibrate.cli",
    "gpu-check": "vllm_kimi_eagle.tools.gpu_check.cli",
    "soak": "vllm_kimi_eagle.tools.soak.cli",
    "eval": "vllm_kimi_eagle.tools.evaluation.cli",
    "lm-eval": "vllm_kimi_eagle.tools.evaluation.lm_eval_cli",
    "compare": "vllm_kimi_eagle.tools.compare.cli",
    "kimi-width": "vllm_kimi_eagle.tools.kimi_width.cli",
    "status": "vllm_kimi_eagle.tools.status",
}


def tool_module(name: str):
    import importlib

    return importlib.import_module(TOOL_MODULES[name])


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse a command line as the command would, without running it (docs are checked
    with this)."""
    if argv[:1] and argv[0] in TOOL_MODULES:
        return tool_module(argv[0]).parse_args(argv[1:])
    return build_parser().parse_args(argv)


def run_command(argv: list[str]) -> int:
    if argv[:1] and argv[0] in TOOL_MODULES:
        return tool_module(argv[0]).main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-kimi-eagle",
        description="Kimi-K2.x EAGLE3 MLA drafts on vLLM: tools around the plugin.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    build = commands.add_parser(
        "build-tiny",
        help="build (or reuse) the tiny Kimi-shaped target and its EAGLE3 MLA drafts",
    )
    build.add_argument("folder", nargs="?", help="output folder (default: the cache)")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.set_defaults(func=_build_tiny)

    commands.add_parser(
        "eval",
        help="lm-eval accuracy and acceptance with and without the draft (--help for options)",
    )
    commands.add_parser(
        "lm-eval",
        help="lm-eval's own command line (lm_eval ARGS), then the acceptance of a --model "
             "vllm run from vLLM's counters",
    )
    commands.add_parser(
        "compare",
        help="serve one target with two or more speculative settings and compare them on "
             "the same requests: per-request acceptance, a 95%% interval, the chat "
             "template's cost (--help for options)",
    )
    commands.add_parser(
        "status",
        help="what a running vLLM server does with its draft: the plugin's plan as its "
             "workers enacted it, live acceptance over a window, a hint where it looks "
             "misread (--help for options)",
    )
    commands.add_parser(
        "bench-e2e",
        help="tokens/s and acceptance vs k and concurrency against real vLLM servers: "
             "no speculation, the plugin, vLLM's in-tree class (--help for options)",
    )
    commands.add_parser(
        "calibrate",
        help="measure which layer reading (and rope base) a draft was trained on, on your "
             "target, and say which setting to apply (--help for options)",
    )
    commands.add_parser(
        "gpu-check",
        help="serve the tiny models on this GPU through a matrix of real vLLM engines and "
             "check the plugin against vLLM's in-tree class (--help for options)",
    )
    commands.add_parser(
        "soak",
        help="serve with and without the draft side by side under mixed, preempting, "
             "cancelling traffic and check greedy answers, errors and memory (--help for "
             "options)",
    )
    commands.add_parser(
        "bench-sampler",
        help="time the greedy argmax shortcut against the plain path (--help for options)",
    )

    inspect = commands.add_parser(
        "inspect",
        help="report a draft's layout, layer ids, the layers vLLM will capture, and problems",
    )
    inspect.add_argument("draft", help="draft model: a folder or a hub id (ORG/NAME, from "
                                       "the Hugging Face cache or the hub)")
    inspect.add_argument("--target", help="target model, folder or hub id (enables range "
                                          "checks; only its config.json is read)")
    inspect.add_argument("--revision", help="the draft's hub revision (branch, tag or commit)")
    inspect.add_argument("--target-revision", help="the target's hub revision")
    inspect.add_argument("--json", action="store_true", help="one JSON object")
    inspect.set_defaults(func=_inspect)

    demo = commands.add_parser(
        "demo", help="serve the tiny Kimi-cost target with and without its draft through "
                     "vLLM; report acceptance, the speedup and whether outputs are identical"
    )
    demo.add_argument("--models", help="tiny models folder (default: the cache)")
    demo.add_argument("--target", default="target-kimi-cost",
                      help="target folder name in it (default: target-kimi-cost)")
    demo.add_argument("--draft", default="draft-kimi-cost",
                      help="draft folder name in it (default: draft-kimi-cost)")
    demo.add_argument("--port", type=int, default=0,
                      help="port of the server with the draft (default: a free one; the "
                           "other server always takes a free one)")
    demo.add_argument("--prompts", type=int, default=4, help="prompts per round (default 4)")
    demo.add_argument("--max-tokens", type=int, default=32, help="greedy tokens per prompt")
    demo.add_argument("--rounds", type=int, default=3,
                      help="interleaved rounds of both servers (default 3)")
    demo.add_argument("--out", default="out/demo", help="where server logs are kept")
    demo.set_defaults(func=_demo)
    return parser


if __name__ == "__main__":
    sys.exit(main())
