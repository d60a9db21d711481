#!/usr/bin/env bash
# Kimi-K2.5 + lightseekorg/kimi-k2.5-eagle3-mla on 8 GPUs (vLLM with vllm-kimi-eagle installed).
# Published acceptance length at 3 draft tokens: about 2.7 (GPQA) to 3.05 (MATH500).
set -euo pipefail
vllm serve moonshotai/Kimi-K2.5 \
  --trust-remote-code \
  --tensor-parallel-size 8 \
  --port "${PORT:-8000}" \
  --speculative-config '{"method": "eagle3", "model": "lightseekorg/kimi-k2.5-eagle3-mla", "num_speculative_tokens": 3}'
