"""What the speculative hook hands the draft class (vllm_kimi_eagle/draft/served_draft.py), read
back from the config vLLM built (fresh process): the capture ids, NoPE, the rope base and
the positions the draft's rotary cache must cover."""

from __future__ import annotations

import json
import os

from packaging.version import Version

from tests.helpers import probe_engine_config, run_python, write_config_only_models
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.draft.architectures import IN_TREE_ALIAS
from vllm_kimi_eagle.draft.draft_config import parse_draft_config, record_from_json

PROBE = """
import json
from vllm.engine.arg_utils import EngineArgs
from vllm_kimi_eagle.draft.served_draft import attached
config = EngineArgs(model={target!r}, max_model_len=512, speculative_config={{
    "method": "eagle3", "model": {draft!r}, "num_speculative_tokens": 3}}).create_engine_config()
served = attached(config.speculative_config.draft_model_config.hf_config)
print(json.dumps({{"served": served and {{k: v for k, v in vars(served).items()
                                          if k not in ("record_json", "config")}},
                  "record": served and served.record_json,
                  "vllm_positions": config.speculative_config.draft_model_config.hf_config
                  .max_position_embeddings}}))
"""


def test_the_draft_class_gets_the_decisions_and_vllms_positions(tmp_path):
    """A draft whose config.json says 256 positions, served with max_model_len 512: vLLM
    0.27-0.32 raise its max_position_embeddings to 512, and the draft class is told so (its
    rotary cache read 256 from config.json would end short of the positions served); 0.33
    raises it only for RoPE types that size nothing but the cache, and leaves this YaRN
    draft at 256 (YaRN sizes its cache from the original positions). The class is told
    what vLLM decided, whichever release."""
    target, draft = write_config_only_models(str(tmp_path), draft_overrides={
        "max_position_embeddings": 256, "mla_use_nope": True})
    result = run_python(PROBE.format(target=target, draft=draft),
                        env={"VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA": "10000"})
    served = result["served"]
    assert served["capture_ids"] == [2, 3, 5]
    assert served["nope"] is True and served["rope_theta"] == 10000.0
    raised = vllm_compat.installed_vllm_version() < Version("0.33.0")
    assert served["max_positions"] == result["vllm_positions"] == (512 if raised else 256), \
        (served, result["vllm_positions"])
    # The record the hook validated travels to the worker as it was: nothing is read from
    # config.json again there.
    hooked = parse_draft_config(json.load(open(os.path.join(draft, "config.json"))),
                                os.path.join(draft, "config.json"))
    assert record_from_json(result["record"]) == hooked
    assert record_from_json(result["record"]).source == os.path.join(draft, "config.json")


HANDED_OFF = """
import json
from vllm.engine.arg_utils import EngineArgs
config = EngineArgs(model={target!r}, max_model_len=512, speculative_config={{
    "method": "eagle3", "model": {draft!r}, "num_speculative_tokens": 3}}).create_engine_config()
draft = config.speculative_config.draft_model_config
print(json.dumps({{"architectures": list(draft.hf_config.architectures),
                  "rope_parameters": draft.hf_config.rope_parameters,
                  "rope_theta": getattr(draft.hf_config, "rope_theta", None)}}))
"""


def test_a_draft_handed_to_vllms_class_gets_the_rope_base_asked_for(tmp_path):
    """VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA on a draft the plugin hands to vLLM's class (a
    scheme its own class does not load): vLLM's class reads the base from the config the
    hook hands it, so the hook writes the one asked for there, as the plugin's class does
    in its own; inspect says it is served (tests/integration/test_trainer_exports.py)."""
    schemes = json.load(open(os.path.join(os.path.dirname(__file__), os.pardir, "data",
                                          "exporter_quantization_configs.json")))["configs"]
    fp8 = next(c for c in schemes if c["name"] == "ct-0.17-fp8-dynamic")["quantization_config"]
    target, draft = write_config_only_models(str(tmp_path),
                                             draft_overrides={"quantization_config": fp8})
    asked = run_python(HANDED_OFF.format(target=target, draft=draft),
                       env={"VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA": "10000"})
    assert asked["architectures"] == [IN_TREE_ALIAS], asked
    assert asked["rope_parameters"]["rope_theta"] == 10000.0, asked
    assert "the draft's rope base is 10000.0 from VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA" \
        in asked["_log"]
    plain = run_python(HANDED_OFF.format(target=target, draft=draft))
    assert plain["architectures"] == [IN_TREE_ALIAS]
    assert plain["rope_parameters"]["rope_theta"] == 50000.0, plain


def test_a_windowed_draft_is_refused_and_the_upstream_route_says_so(tmp_path):
    """A sliding window (draft_fields): refused at start-up, naming the field, where the
    plugin's class would serve the draft; with VLLM_KIMI_EAGLE_DRAFT=upstream vLLM's class
    serves it as asked, and start-up says what it serves otherwise than config.json, with
    the rope base asked for applied on that route too."""
    target, draft = write_config_only_models(str(tmp_path), draft_overrides={
        "sliding_window": 16, "use_sliding_window": True})
    refused = probe_engine_config(target, draft).get("error")
    assert refused and "DraftRefusedError" in refused and \
        "field 'sliding_window' is 16: " in refused, refused
    upstream = run_python(HANDED_OFF.format(target=target, draft=draft),
                          env={"VLLM_KIMI_EAGLE_DRAFT": "upstream",
                               "VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA": "10000"})
    assert upstream["rope_parameters"]["rope_theta"] == 10000.0, upstream
    assert "the draft's rope base is 10000.0 from VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA" \
        in upstream["_log"]
    assert "serves it otherwise than its config.json says" in upstream["_log"] and \
        "field 'sliding_window' is 16" in upstream["_log"]
