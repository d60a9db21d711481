"""``vllm-kimi-eagle calibrate``: measure which layer reading (and rope base) a draft was
trained on, on the user's own target, instead of guessing from its config.

A draft's ``eagle_aux_hidden_state_layer_ids`` may mean "output of layer N" (training
tools) or "input of layer N" (vLLM), a config may carry two lists that disagree, and a
config can state a convention that is simply wrong. Every plausible reading is a
candidate (``candidates``): the ids as written, plus one, from each list the config has,
limited to the layers the target can capture, times each rope base asked for.

How it measures, with one start of the target:

1. **capture**: the target runs once with vLLM's own ``extract_hidden_states``
   speculative method, keeping the inputs of the union of every candidate's layers, and
   our small KV connector (``connector``) writes them per request to disk, for the
   prompts and the target's greedy continuation (``engines``);
2. **score**: each candidate's draft (the pure-PyTorch reference of the draft, loaded
   with the checkpoint's weights) runs its k chained steps on those captured states,
   teacher-forced on the target's greedy tokens, and counts how many it gets right in a
   row (``scoring``): an offline acceptance length per candidate, per position, per
   prompt, compared prompt by prompt (``decision``, ``tools/figures/paired.py``);
3. **confirm**: the best candidate and the reading the plugin applies today are served
   by vLLM with the draft (a calibrated copy of its folder), and their acceptance is read
   from vLLM's own counters: a recommendation stands unless vLLM gives today's reading
   the higher one (the same rule on every release).

When the best reading beats today's by more than the noise, the command says which
setting to apply and exits 3; ``--write DIR`` writes a calibrated copy of the draft
(same tensors, config.json with the explicit reading). The user's folder is never
modified.
"""
