"""What the plugin does outside its own path, at config level (fresh processes): nothing is
read for an EAGLE3 draft that is not an MLA draft, and the CPU sampler mend is announced
for every speculative method it serves. (Served side by side with vLLM alone:
tests/e2e/test_scope_e2e.py.)"""

from __future__ import annotations

import os

from tests.helpers import run_python, write_config_only_models

LLAMA_DRAFT = {"model_type": "llama", "architectures": ["LlamaForCausalLMEagle3"],
               "kv_lora_rank": None, "q_lora_rank": None, "head_dim": 64}

# Every look the plugin's code takes into a draft folder beyond its config files, as
# Python's audit events see it (any open, listing or scan, by whichever of its functions;
# vLLM's own scans are not counted), and every network connection it opens.
COUNT_HEADER_READS = """
import json, os, sys
reads = []
def by_the_plugin():
    # The nearest caller that is the plugin, vLLM or transformers decides (the standard
    # library and huggingface_hub act for whoever called them).
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if os.sep + "vllm_kimi_eagle" + os.sep in name:
            return True
        if any(os.sep + package + os.sep in name for package in ("vllm", "transformers")):
            return False
        frame = frame.f_back
    return False
def audit(event, args):
    if event not in ("socket.connect", "open", "os.listdir", "os.scandir") or \\
            not by_the_plugin():
        return
    if event == "socket.connect":
        reads.append("network")
    elif event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], str):
        path = os.path.abspath(args[0])
        for draft in {drafts!r}:
            inside = path == draft or path.startswith(draft + os.sep)
            if inside and not path.endswith((".json", ".jinja", ".txt")):
                reads.append(draft)
sys.addaudithook(audit)
from vllm.engine.arg_utils import EngineArgs
config = EngineArgs(model={target!r}, max_model_len=256, speculative_config={spec!r}
                    ).create_engine_config()
print(json.dumps({{"reads": sorted(set(reads))}}))
"""


def header_reads(target: str, spec: dict) -> dict:
    drafts = [os.path.abspath(spec["model"])] if "model" in spec else []
    return run_python(COUNT_HEADER_READS.format(target=target, spec=spec, drafts=drafts))


def test_headers_are_read_for_mla_drafts_only(tmp_path):
    target, mla = write_config_only_models(str(tmp_path / "mla"))
    _, llama = write_config_only_models(str(tmp_path / "llama"), draft_overrides=LLAMA_DRAFT)
    spec = {"method": "eagle3", "num_speculative_tokens": 3}
    assert header_reads(target, {**spec, "model": mla})["reads"] == [mla]
    llama_run = header_reads(target, {**spec, "model": llama})
    assert llama_run["reads"] == []
    # The layer ids are still resolved for it (a Kimi target), from its config alone.
    assert "vllm-kimi-eagle: draft ids" in llama_run["_log"]


def test_the_cpu_sampler_mend_is_announced_for_every_method(tmp_path):
    target, _ = write_config_only_models(str(tmp_path))
    ngram = header_reads(target, {"method": "ngram", "num_speculative_tokens": 3,
                                  "prompt_lookup_max": 3})
    assert ngram["reads"] == []
    assert "vLLM's CPU rejection sampler is mended by the plugin" in ngram["_log"]
