#!/usr/bin/env bash
# GPQA accuracy, acceptance and speedup for Kimi-K2.6 with and without its EAGLE3.1 MLA
# draft, in one report: `vllm-kimi-eagle eval` (docs/evaluation.md). Needs access to the
# gated dataset Idavidrein/gpqa (huggingface-cli login). Either let the command start both
# servers (8 GPUs each, one after the other; loading a 1T-parameter model can take long,
# hence --startup-timeout) ...
# GPQA is text: --language-model-only keeps vLLM from building Kimi's vision tower in
# both servers (same draft behaviour, less memory; docs/multimodal.md).
set -euo pipefail
vllm-kimi-eagle eval --target moonshotai/Kimi-K2.6 --draft lightseekorg/kimi-k2.6-eagle3.1-mla \
  --server-arg=--tensor-parallel-size=8 --server-arg=--trust-remote-code \
  --server-arg=--language-model-only --server-arg=--max-model-len=32768 --startup-timeout 3600 \
  --task gpqa_diamond_cot_zeroshot --max-tokens 16384 --concurrency 16 --out out/eval-kimi-k26
# ... or point it at two servers you already run (one without, one with the draft):
#   vllm-kimi-eagle eval --base-url http://HOST:8001 --spec-url http://HOST:8000 \
#     --task gpqa_diamond_cot_zeroshot --max-tokens 16384 --concurrency 16
