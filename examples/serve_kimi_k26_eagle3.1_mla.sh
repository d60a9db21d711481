#!/usr/bin/env bash
# Kimi-K2.6 + lightseekorg/kimi-k2.6-eagle3.1-mla (EAGLE3.1: fc_norm + norm_output) on 8 GPUs.
# vLLM serves the checkpoint as the multimodal KimiK25ForConditionalGeneration; the draft
# reads its language model's layers, text and images alike (docs/multimodal.md: "Kimi-K2.5 / K2.6 are
# multimodal"). --trust-remote-code: the checkpoint's tokenizer is remote code.
# TEXT_ONLY=1 adds --language-model-only: no vision tower is built, image requests are
# refused, speculative decoding is the same; leave it off to serve images.
set -euo pipefail
text_only=()
if [[ "${TEXT_ONLY:-0}" == 1 ]]; then text_only=(--language-model-only); fi
vllm serve moonshotai/Kimi-K2.6 \
  --trust-remote-code \
  --tensor-parallel-size 8 \
  --port "${PORT:-8000}" \
  ${text_only[@]+"${text_only[@]}"} \
  --speculative-config '{"method": "eagle3", "model": "lightseekorg/kimi-k2.6-eagle3.1-mla", "num_speculative_tokens": 3}'
