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

    report = inspect_draft(args.draft, args.target)
    print(json.dumps(report) if args.json else format_report(report))
    return 1 if report["problems"] else 0


def _demo(args) -> int:
    from vllm_kimi_eagle.tools import demo

    return demo.main(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench-sampler"]:  # its own options; see tools/bench_sampler.py
        from vllm_kimi_eagle.tools import bench_sampler

        return bench_sampler.main(argv[1:])
    if argv[:1] == ["bench-e2e"]:  # its own options; see tools/bench_e2e/
        from vllm_kimi_eagle.tools.bench_e2e import cli

        return cli.main(argv[1:])
    if argv[:1] == ["calibrate"]:  # its own options; see tools/calibrate/
        from vllm_kimi_eagle.tools.calibrate import cli

        return cli.main(argv[1:])
    if argv[:1] == ["gpu-check"]:  # its own options; see tools/gpu_check/
        from vllm_kimi_eagle.tools.gpu_check import cli

        return cli.main(argv[1:])
    if argv[:1] == ["soak"]:  # its own options; see tools/soak/
        from vllm_kimi_eagle.tools.soak import cli

        return cli.main(argv[1:])
    if argv[:1] == ["eval"]:  # its own options; see tools/evaluation/
        from vllm_kimi_eagle.tools.evaluation import cli

        return cli.main(argv[1:])
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
    inspect.add_argument("draft", help="draft model folder")
    inspect.add_argument("--target", help="target model folder (enables range checks)")
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

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
