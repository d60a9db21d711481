"""The route matrix: every malformed or unusual draft below, taken through every route a
draft reaches a class by, with vLLM's own config path deciding (docs/checkpoints.md
prints the table; tests/integration/test_route_matrix.py makes it).

Routes: the plugin's class (the default); the hand-off to vLLM's class (here: a vLLM
minor where what the plugin's class builds on moved, planted in the process);
``VLLM_KIMI_EAGLE_DRAFT=upstream``; the worker's fallback (the hook's method moved too:
vLLM builds the config without the hook, and the class registered for the draft checks it
where it is built, ``draft_class_entry.check_in_tree``).

Each cell is what start-up did: ``refused`` (one error naming the file and the field),
``served`` (what the class serves is what the draft was trained as), ``warned`` (served
as the user asked, with a warning line naming each field vLLM's class serves otherwise),
or ``SILENT``: served otherwise than trained without a word, which must never be.

    python tests/route_matrix.py TINY_FOLDER WORK_FOLDER ROUTE   (one route: prints JSON)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass

ROUTES = ("plugin", "hand-off", "upstream", "fallback")
ROUTE_WORDS = {"plugin": "the plugin's class", "hand-off": "hand-off to vLLM's class",
               "upstream": "`VLLM_KIMI_EAGLE_DRAFT=upstream`", "fallback": "worker's fallback"}
ENV = {"plugin": {}, "hand-off": {}, "upstream": {"VLLM_KIMI_EAGLE_DRAFT": "upstream"},
       "fallback": {}}
MOVED = "vllm.x.DeepseekV2MLAAttention takes no parameter 'input_size' any more (planted)"
MARKER = "@@route-matrix case: "
# The line the hook logs where vLLM's class serves a draft otherwise than trained.
WARNED = "and serves it otherwise than its config.json says"


def warnings_by_case(log: str) -> dict:
    """The hook's warning lines of each case, from a route's log (vLLM logs to stdout, in
    order with the markers ``run_route`` prints)."""
    found, case = {}, None
    for line in log.splitlines():
        if line.startswith(MARKER):
            case = line[len(MARKER):]
            found[case] = []
        elif case is not None and WARNED in line:
            found[case].append(line)
    return found


@dataclass(frozen=True)
class Case:
    name: str
    base: str  # the tiny draft it is a copy of
    what: str  # what the draft is, and what vLLM's class alone does with it
    # The routes on which serving it without a word is right (the class serves what the
    # draft was trained as); on the others it must be refused or warned.
    right_on: tuple[str, ...] = ()
    config: dict | None = None  # config.json fields to set (None: remove the key)
    tensors: str = ""  # a key of TENSOR_EDITS
    # The IN_TREE_GAPS row behind ``right_on``, where it holds on some releases only: on
    # the others vLLM's class serves the draft as trained, so every route may serve it.
    gap: str = ""

    def right_on_here(self, release) -> tuple[str, ...]:
        """``right_on`` on vLLM ``release``."""
        from vllm_kimi_eagle.draft.draft_class import IN_TREE_GAPS

        if not self.gap:
            return self.right_on
        rows = [gap for gap in IN_TREE_GAPS if gap.field == self.gap]
        assert rows, f"case {self.name!r}: no IN_TREE_GAPS row for field {self.gap!r}"
        return self.right_on if rows[0].holds_on(release) else ALL


def _drop(*names):
    return lambda t, spec: {k: v for k, v in t.items() if k not in names}


def _add(**extra):
    def edit(t, spec):
        import torch

        return {**t, **{name: make(torch, t) for name, make in extra.items()}}
    return edit


def _pruned_d2t(values):
    def edit(t, spec):
        import torch

        return {**t, "d2t": torch.tensor(values(len(t["d2t"])), dtype=t["d2t"].dtype)}
    return edit


def _full_rank_q(t, spec):
    """q projected at full rank (q_lora_rank null): q_proj for q_a/q_a_layernorm/q_b."""
    import torch

    out = {k: v for k, v in t.items() if not any(
        part in k for part in ("q_a_proj", "q_a_layernorm", "q_b_proj"))}
    out["layers.0.self_attn.q_proj.weight"] = torch.zeros(
        t["layers.0.self_attn.q_b_proj.weight"].shape[0],
        t["layers.0.self_attn.q_a_proj.weight"].shape[1])
    return out


def _two_states(t, spec):
    return {**t, "fc.weight": t["fc.weight"][:, : 2 * 256].contiguous()}


def _under_model(t, spec):
    return {(k if k in ("lm_head.weight", "d2t", "t2d") else f"model.{k}"): v
            for k, v in t.items()}


TENSOR_EDITS = {
    "no d2t": _drop("d2t", "t2d"),
    "d2t repeats": _pruned_d2t(lambda n: [0] * (n - 2) + [-1, -1]),
    "d2t outside": _pruned_d2t(lambda n: [1000] * n),
    "d2t float": lambda t, spec: {**t, "d2t": t["d2t"].float()},
    "no lm_head": _drop("lm_head.weight"),
    "no embed_tokens": _drop("embed_tokens.weight"),
    "no q_a_layernorm": _drop("layers.0.self_attn.q_a_layernorm.weight"),
    "no o_proj": _drop("layers.0.self_attn.o_proj.weight"),
    "no final norm": _drop("norm.weight"),
    "o_proj bias": _add(**{"layers.0.self_attn.o_proj.bias": lambda torch, t: torch.zeros(256)}),
    "fc misshapen": lambda t, spec: {**t, "fc.weight": t["fc.weight"][:, :700].contiguous()},
    "unknown tensor": _add(**{"layers.0.extra.weight": lambda torch, t: torch.zeros(4)}),
    "two prefixes": _add(**{"midlayer.input_layernorm.weight":
                            lambda torch, t: t["layers.0.input_layernorm.weight"].clone()}),
    "rotary buffer": _add(**{"layers.0.self_attn.rotary_emb.inv_freq":
                             lambda torch, t: torch.ones(32)}),
    "identity d2t": _add(d2t=lambda torch, t: torch.zeros(512, dtype=torch.long)),
    "full-rank q": _full_rank_q,
    "two states": _two_states,
    "under model.": _under_model,
}
ALL = ROUTES
PLUGIN = ("plugin",)
CASES = (
    Case("the base draft", "draft", "served as trained by both classes", ALL),
    Case("no embed_tokens or lm_head (target's shared)", "draft-shared",
         "both share the target's, as it was trained", ALL),
    Case("pruned, no d2t", "draft-pruned", "vLLM's class reads draft id k as target id k "
         "(acceptance 1.0)", tensors="no d2t"),
    Case("pruned, d2t with repeats", "draft-pruned", "vLLM's class writes two draft logits "
         "into one target id", tensors="d2t repeats"),
    Case("pruned, d2t outside the vocabulary", "draft-pruned", "vLLM's class indexes past "
         "the target's vocabulary", tensors="d2t outside"),
    Case("pruned, float d2t", "draft-pruned", "vLLM's class casts it", tensors="d2t float"),
    Case("pruned, no lm_head", "draft-pruned", "vLLM's class uses the target's head's "
         "first rows", tensors="no lm_head"),
    Case("narrow, no embed_tokens", "draft-narrow", "vLLM's V1 runner keeps an "
         "uninitialised embedding", tensors="no embed_tokens"),
    Case("no q_a_layernorm", "draft", "vLLM's class leaves its weight at 1",
         tensors="no q_a_layernorm"),
    Case("no o_proj", "draft", "vLLM's class leaves it uninitialised", tensors="no o_proj"),
    Case("an o_proj bias", "draft", "vLLM's class drops it", tensors="o_proj bias"),
    Case("fc misshapen", "draft", "vLLM's class fails naming no file",
         tensors="fc misshapen"),
    Case("an unknown tensor", "draft", "vLLM's class fails naming no file",
         tensors="unknown tensor"),
    Case("one tensor under two prefixes", "draft", "vLLM's class loads both, the later "
         "winning", tensors="two prefixes"),
    Case("a rotary inv_freq buffer", "draft", "both drop it and rebuild it from the config",
         ALL, tensors="rotary buffer"),
    Case("full vocabulary, identity d2t", "draft", "vLLM's class (0.30 on) has no d2t to "
         "load it into", PLUGIN, tensors="identity d2t", gap="d2t"),
    Case("q_lora_rank null, q at full rank", "draft", "vLLM's class cannot load it",
         PLUGIN, config={"q_lora_rank": "null"}, tensors="full-rank q"),
    Case("q_lora_rank left out", "draft", "read as none by the plugin, 1536 by "
         "transformers: neither fits the checkpoint's q_a_proj", config={"q_lora_rank": None}),
    Case("num_hidden_layers left out", "draft", "vLLM's class builds 61 layers, loads one",
         PLUGIN, config={"num_hidden_layers": None}),
    Case("every tensor under model.", "draft", "vLLM's class cannot load it", PLUGIN,
         tensors="under model."),
    Case("two capture ids at the top level only", "draft", "vLLM's class sizes fc for 3",
         PLUGIN, config={"eagle_aux_hidden_state_layer_ids": [2, 5],
                         "eagle_config": {"use_aux_hidden_state": True}},
         tensors="two states"),
    Case("Kimi-K3 NoPE", "draft-k3-nope", "vLLM's class rotates its rope dims", PLUGIN),
    Case("Kimi-K3 NoPE, rope_interleave false", "draft-k3-nope", "a NoPE draft rotates "
         "nothing; vLLM's class rotates", PLUGIN, config={"rope_interleave": False}),
    Case("Kimi-K3 output gate", "draft-k3-gate", "vLLM's class cannot load g_proj", PLUGIN),
    Case("no final norm (use_last_layernorm false)", "draft", "vLLM's class applies one at "
         "weight 1", PLUGIN, config={"eagle_config": {
             "eagle_aux_hidden_state_layer_ids": [2, 3, 5], "use_last_layernorm": False}},
         tensors="no final norm"),
    Case("linear rope", "draft", "vLLM's MLA attention serves it as DeepSeek YaRN",
         config={"rope_scaling": {"type": "linear", "factor": 4.0}}),
    Case("a sliding window", "draft", "vLLM's MLA attention applies none",
         config={"sliding_window": 16}),
    Case("layer ids written as text", "draft", "transformers or vLLM fail on it",
         config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": ["a", "b", "c"]}}),
)


def write_case(tiny: str, work: str, case: Case) -> str:
    """The case's draft folder under ``work``."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = os.path.join(work, case.name.replace(" ", "-").replace(",", "").replace("'", ""))
    if os.path.isdir(folder):
        return folder
    shutil.copytree(os.path.join(tiny, case.base), folder)
    path = os.path.join(folder, "config.json")
    config = json.load(open(path))
    for key, value in (case.config or {}).items():
        if value is None:
            config.pop(key, None)
        elif isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = None if value == "null" else value
        if key == "eagle_aux_hidden_state_layer_ids" and "eagle_config" in config:
            config["eagle_config"].pop("eagle_aux_hidden_state_layer_ids", None)
    json.dump(config, open(path, "w"))
    if case.tensors:
        weights = load_file(os.path.join(folder, "model.safetensors"))
        weights = TENSOR_EDITS[case.tensors](weights, None)
        os.unlink(os.path.join(folder, "model.safetensors"))
        save_file({k: v.contiguous() if isinstance(v, torch.Tensor) else v
                   for k, v in weights.items()}, os.path.join(folder, "model.safetensors"),
                  metadata={"format": "pt"})
    return folder


def run_route(tiny: str, work: str, route: str) -> dict:
    """Start-up on every case for one route, in this process: the outcome and the log."""
    from vllm_kimi_eagle.compat import release_gate
    from vllm_kimi_eagle.serving import speculative_hook

    if route in ("hand-off", "fallback"):
        release_gate.contract_problems_here = lambda: (MOVED,)
    if route == "fallback":
        speculative_hook.install_speculative_hook = lambda asked: None
    import vllm_kimi_eagle

    vllm_kimi_eagle.register()
    from vllm.engine.arg_utils import EngineArgs

    from vllm_kimi_eagle.serving import draft_class_entry

    results = {}
    for case in CASES:
        folder = write_case(tiny, work, case)
        print(f"{MARKER}{case.name}", flush=True)  # the log's lines that follow are its
        try:
            config = EngineArgs(model=os.path.join(tiny, "target"), max_model_len=256,
                                speculative_config={"method": "eagle3", "model": folder,
                                                    "num_speculative_tokens": 3},
                                ).create_engine_config()
            if route == "fallback":
                draft_class_entry.check_in_tree(config, (MOVED,))
            outcome = {"started": True}
        except Exception as err:
            outcome = {"started": False, "error": f"{type(err).__name__}: {err}"}
        results[case.name] = outcome
    return results


def cell(case: Case, route: str, outcome: dict, release) -> str:
    """One cell of the matrix (see the module's docstring) on vLLM ``release``."""
    if not outcome["started"]:
        return "refused"
    if route in case.right_on_here(release):
        return "served"
    return "warned" if outcome["warnings"] else "SILENT"


def table(results: dict, release) -> str:
    """The matrix as docs/checkpoints.md prints it; ``results``: route -> run_route's on
    vLLM ``release``."""
    lines = ["| draft | vLLM's class alone | " + " | ".join(ROUTE_WORDS[r] for r in ROUTES) + " |",
             "|---|---|" + "---|" * len(ROUTES)]
    for case in CASES:
        cells = [cell(case, route, results[route][case.name], release) for route in ROUTES]
        lines.append(f"| {case.name} | {case.what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    tiny_folder, work_folder, asked_route = sys.argv[1:4]
    os.makedirs(work_folder, exist_ok=True)
    print(json.dumps(run_route(tiny_folder, work_folder, asked_route)))
