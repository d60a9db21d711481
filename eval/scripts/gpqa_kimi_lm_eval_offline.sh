#!/usr/bin/env bash
# GPQA on Kimi-K2.6 with lm-eval's own offline `vllm` model, without and then with the
# EAGLE3.1 MLA draft (docs/evaluation.md). lm-eval builds vLLM's LLM in its own process;
# the plugin loads there like in any vLLM process. `vllm-kimi-eagle lm-eval` is `lm_eval`
# with the same arguments, then vLLM's acceptance counters of the run; plain `lm_eval`
# takes the same arguments. --model_args is one JSON object (lm-eval 0.4.9 or later):
# the speculative config's commas cannot go through lm-eval's key=value form.
# Needs access to the gated dataset Idavidrein/gpqa (huggingface-cli login) and 8 GPUs.
set -euo pipefail
MODEL_ARGS='"pretrained": "moonshotai/Kimi-K2.6", "tensor_parallel_size": 8, "trust_remote_code": true, "max_model_len": 32768, "seed": 0, "disable_log_stats": false'
SPEC='"speculative_config": {"method": "eagle3", "model": "lightseekorg/kimi-k2.6-eagle3.1-mla", "num_speculative_tokens": 3}'
for RUN in without-draft with-draft; do
  ARGS="{$MODEL_ARGS}"
  if [ "$RUN" = with-draft ]; then ARGS="{$MODEL_ARGS, $SPEC}"; fi
  vllm-kimi-eagle lm-eval run --model vllm --model_args "$ARGS" \
    --tasks gpqa_diamond_cot_zeroshot --apply_chat_template --batch_size auto \
    --gen_kwargs max_gen_toks=16384 --log_samples --output_path "out/lm-eval-kimi-k26/$RUN"
done
