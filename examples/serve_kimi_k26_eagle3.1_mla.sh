#!/usr/bin/env bash
# Kimi-K2.6 + lightseekorg/kimi-k2.6-eagle3.1-mla (EAGLE3.1: fc_norm + norm_output) on 8 GPUs.
set -euo pipefail
vllm serve moonshotai/Kimi-K2.6 \
  --trust-remote-code \
  --tensor-parallel-size 8 \
  --port "${PORT:-8000}" \
  --speculative-config '{"method": "eagle3", "model": "lightseekorg/kimi-k2.6-eagle3.1-mla", "num_speculative_tokens": 3}'
