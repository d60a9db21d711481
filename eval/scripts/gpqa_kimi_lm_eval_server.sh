#!/usr/bin/env bash
# GPQA on Kimi-K2.6 with lm-eval against running vLLM servers (docs/evaluation.md): one
# without the draft (BASE_URL, port 8001) and one with the EAGLE3.1 MLA draft (SPEC_URL,
# port 8000), e.g.
#   vllm serve moonshotai/Kimi-K2.6 --tensor-parallel-size 8 --trust-remote-code \
#     --max-model-len 32768 --port 8000 --speculative-config \
#     '{"method": "eagle3", "model": "lightseekorg/kimi-k2.6-eagle3.1-mla", "num_speculative_tokens": 3}'
# The chat endpoint applies Kimi's chat template as in production. Acceptance is the
# speculating server's: its /metrics counters before and after the run.
# Needs access to the gated dataset Idavidrein/gpqa (huggingface-cli login).
set -euo pipefail
BASE_URL=${BASE_URL:-http://127.0.0.1:8001}
SPEC_URL=${SPEC_URL:-http://127.0.0.1:8000}
spec() {  # drafts and accepted tokens so far, summed over the server's engines
  curl -s "$SPEC_URL/metrics" | awk '/^vllm:spec_decode_num_drafts_total/ {d += $NF}
    /^vllm:spec_decode_num_accepted_tokens_total/ {a += $NF} END {print d + 0, a + 0}'
}
read -r D0 A0 < <(spec)
for RUN in without-draft with-draft; do
  URL=$BASE_URL
  if [ "$RUN" = with-draft ]; then URL=$SPEC_URL; fi
  lm_eval run --model local-chat-completions --tasks gpqa_diamond_cot_zeroshot --apply_chat_template \
    --model_args '{"model": "moonshotai/Kimi-K2.6", "base_url": "'"$URL"'/v1/chat/completions", "num_concurrent": 16, "max_retries": 3, "tokenized_requests": false}' \
    --gen_kwargs max_gen_toks=16384 --log_samples --output_path "out/lm-eval-kimi-k26-server/$RUN"
done
read -r D1 A1 < <(spec)
awk -v d="$D0" -v a="$A0" -v D="$D1" -v A="$A1" 'BEGIN {if (D > d) printf "drafts %d, acceptance length %.3f\n", D - d, 1 + (A - a) / (D - d); else print "no drafts proposed"}'
