"""Quantized drafts (vllm_kimi_eagle/draft/quantization.py): the schemes read from a config, the
tensors each adds, the dtype rule, and where a platform cannot serve them right."""

from __future__ import annotations

import pytest
import torch

import json
import os
import re

from tests.records import spec_from_config
from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.draft_config import QUANT_FILE, parse_draft_config, read_draft_config
from vllm_kimi_eagle.draft.draft_spec import DraftConfigError, expected_tensors, linear_weights
from vllm_kimi_eagle.draft.quantization import (
    OTHER,
    Quantization,
    QuantizationConfigError,
    require_plugin_loads,
    scheme_words,
    serving_problem,
)
from vllm_kimi_eagle.fixtures import variants
from vllm_kimi_eagle.fixtures.quantized import SCHEMES, block_fp8, int8_per_channel


def config(quantization_config=None):
    found = variants.draft_config(variants.DRAFT_VARIANTS[0])
    if quantization_config is not None:
        found["quantization_config"] = quantization_config
    return found


def test_schemes_read_from_the_config():
    assert spec_from_config(config()).quantization is None
    fp8 = spec_from_config(config(SCHEMES["fp8-block"]((64, 128)))).quantization
    assert fp8 == Quantization("fp8-block", (64, 128))
    assert spec_from_config(config(SCHEMES["int8-channel"](None))).quantization == \
        Quantization("int8-channel")


@pytest.mark.parametrize("raw", [
    {"quant_method": "awq", "bits": 4, "group_size": 128},
    {"quant_method": "fp8"},  # per-tensor FP8: not checked
    {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "static"},
    {**SCHEMES["int8-channel"](None), "config_groups": {}},
], ids=["awq", "fp8-per-tensor", "fp8-static", "compressed-tensors-other"])
def test_a_scheme_the_plugin_does_not_check_is_left_to_vllm_by_name(raw):
    found = spec_from_config(config(raw), source="draft/config.json").quantization
    assert found.scheme == OTHER and not found.loads_in_plugin_class
    assert found.words == f"{scheme_words(raw)} (read from quantization_config)"
    assert found.weight_dtype is None  # no dtype rule: vLLM's class loads it
    with pytest.raises(QuantizationConfigError, match="does not load.*"
                                                      "VLLM_KIMI_EAGLE_DRAFT=upstream"):
        require_plugin_loads(found, "draft/config.json")


# quantization_config as real exporters write it (compressed-tensors 0.6-0.17, ModelOpt
# 0.23-0.46, DeepSeek, transformers, AutoFP8), each with where it was read.
EXPORTS = json.load(open(os.path.join(os.path.dirname(__file__), os.pardir, "data",
                                      "exporter_quantization_configs.json")))["configs"]
# The exports the plugin's class checks and loads; every other one it leaves to vLLM.
SERVED_BY_THE_PLUGIN = {
    "ct-0.17-w8a8-int8": Quantization("int8-channel"),
    "ct-0.9-w8a8-int8": Quantization("int8-channel"),
    "deepseek-v3-fp8-block": Quantization("fp8-block", (128, 128)),
    "transformers-finegrained-fp8": Quantization("fp8-block", (128, 128)),
}


def _written(export: dict) -> dict:
    """config.json with the export where its exporter writes it."""
    key = export["config_key"]
    return config() | {("quantization_config" if key == QUANT_FILE else key):
                       export["quantization_config"]}


@pytest.mark.parametrize("export", EXPORTS, ids=[e["name"] for e in EXPORTS])
def test_the_record_accepts_every_quantization_config_real_exporters_write(export):
    record = parse_draft_config(_written(export), "d/config.json")
    assert record.quantization_config == export["quantization_config"]


@pytest.mark.parametrize("export", EXPORTS, ids=[e["name"] for e in EXPORTS])
def test_the_plugins_class_loads_its_schemes_and_names_the_others(export):
    name = export["name"]
    found = spec_from_config(_written(export), "d/config.json").quantization
    if name in SERVED_BY_THE_PLUGIN:
        assert found == SERVED_BY_THE_PLUGIN[name] and found.loads_in_plugin_class
        return
    assert not found.loads_in_plugin_class
    key = export["config_key"].replace(QUANT_FILE, "quantization_config")
    assert found.words.endswith(f"(read from {key})")
    method = export["quantization_config"].get("quant_method", "ModelOpt")
    assert ("ModelOpt" if export["exporter"] == "modelopt" else method) in found.words


def test_the_scheme_is_named_in_words():
    by_name = {e["name"]: e["quantization_config"] for e in EXPORTS}
    from vllm_kimi_eagle.draft.quantization import scheme_words

    assert scheme_words(by_name["ct-0.17-nvfp4"]) == (
        "compressed-tensors (group_0: weights float 4-bit tensor_group group 16 dynamic "
        "False, activations float 4-bit tensor_group group 16 dynamic 'local')")
    assert scheme_words(by_name["modelopt-0.46-eagle3-draft-nvfp4-nested"]) == "ModelOpt NVFP4"
    assert scheme_words(by_name["modelopt-0.33-fp8-config-json"]) == "ModelOpt FP8"
    assert scheme_words(by_name["autofp8-static"]) == \
        "fp8 per tensor, activation_scheme 'static'"


def test_compression_config_and_hf_quant_config_are_read_where_vllm_reads_them(tmp_path):
    """compressed-tensors' older key, and ModelOpt's file beside config.json, are the
    draft's quantization where config.json has no quantization_config."""
    int8 = SCHEMES["int8-channel"](None)
    record = parse_draft_config(config() | {"compression_config": int8})
    assert (record.quantization_config, record.quantization_from) == (int8, "compression_config")
    assert spec_from_config(record).quantization == Quantization("int8-channel")
    both = parse_draft_config(config(int8) | {"compression_config": {"quant_method": "x"}})
    assert both.quantization_from == "quantization_config"

    modelopt = next(e for e in EXPORTS if e["name"] == "modelopt-0.23-fp8-hf_quant_config")
    (tmp_path / "config.json").write_text(json.dumps(config()))
    assert read_draft_config(str(tmp_path)).quantization_config is None
    (tmp_path / QUANT_FILE).write_text(json.dumps(modelopt["quantization_config"]))
    record = read_draft_config(str(tmp_path))
    assert record.quantization_from == QUANT_FILE
    assert record.quantization_config == modelopt["quantization_config"]
    assert spec_from_config(record).quantization.words == f"ModelOpt FP8 (read from {QUANT_FILE})"
    (tmp_path / QUANT_FILE).write_text("{")
    with pytest.raises(DraftConfigError, match=f"{QUANT_FILE}: not valid JSON"):
        read_draft_config(str(tmp_path))
    # config.json's own quantization_config wins, as in vLLM.
    (tmp_path / "config.json").write_text(json.dumps(config(int8)))
    assert read_draft_config(str(tmp_path)).quantization_from == "quantization_config"


@pytest.mark.parametrize("block", [[128], [1, 2, 3], [128, "128"], [0, 128], [True, 128], "128x128"])
def test_a_block_size_the_class_cannot_read_is_refused_by_name(block):
    raw = {"quant_method": "fp8", "weight_block_size": block, "activation_scheme": "dynamic"}
    with pytest.raises(DraftConfigError, match="field 'quantization_config.weight_block_size' "
                                               "is .*expected a list of 2 positive integers"):
        spec_from_config(config(raw), "d/config.json")


def test_every_linear_gets_its_scales():
    spec = spec_from_config(config(SCHEMES["fp8-block"]((64, 128))))
    tensors = expected_tensors(spec)
    for name in linear_weights(spec):
        n, k = tensors[name]
        assert tensors[name.removesuffix("weight") + "weight_scale_inv"] == (-(-n // 64), -(-k // 128))
    assert "lm_head.weight_scale_inv" not in tensors and "embed_tokens.weight_scale_inv" not in tensors
    int8 = expected_tensors(spec_from_config(config(SCHEMES["int8-channel"](None))))
    assert int8["fc.weight_scale"] == (int8["fc.weight"][0], 1)


def test_a_linear_left_in_float_is_a_problem():
    spec = spec_from_config(config(SCHEMES["fp8-block"]((64, 128))))
    name = "layers.0.self_attn.q_a_proj.weight"
    shape = expected_tensors(spec)[name]
    assert checkpoint.tensor_problem(spec, name, shape, "F8_E4M3") is None
    assert checkpoint.tensor_problem(spec, name, shape, torch.float8_e4m3fn) is None
    problem = checkpoint.tensor_problem(spec, name, shape, "F32")
    assert "has dtype F32" in problem and "Quantize it like the others" in problem
    # Unquantized drafts take any float dtype.
    plain = spec_from_config(config())
    assert checkpoint.tensor_problem(plain, name, shape, "BF16") is None


@pytest.mark.parametrize("quantization, q_lora, on_cpu, amx, dtype, says", [
    (Quantization("fp8-block", (64, 128)), 64, True, True, "bfloat16", None),
    (Quantization("fp8-block", (128, 128)), 64, False, False, "bfloat16",
     "q_lora_rank 64 is not a multiple of block_n 128"),
    (Quantization("fp8-block", (128, 128)), 1536, False, False, "bfloat16", None),
    (Quantization("fp8-block", (64, 128)), 64, False, False, "bfloat16", "square blocks"),
    (Quantization("fp8-block", (64, 64)), 64, False, False, "bfloat16", None),
    (Quantization("fp8-block", (64, 128)), 64, True, False, "bfloat16", "needs a CPU with AMX"),
    (Quantization("fp8-block", (64, 128)), 64, True, True, "float32",
     "needs bfloat16 or float16 activations"),
    (Quantization("int8-channel"), 64, True, True, "float32", "needs bfloat16"),
    (Quantization("int8-channel"), 64, True, False, "bfloat16", "needs a CPU with AMX"),
    (Quantization("int8-channel"), 64, False, False, "float32", None),
], ids=["fp8-amx", "fp8-q-lora", "fp8-gpu", "fp8-gpu-not-square", "fp8-gpu-square", "fp8-no-amx", "fp8-float32", "int8-amx-float32",
        "int8-no-amx", "int8-gpu"])
def test_where_a_scheme_is_served(quantization, q_lora, on_cpu, amx, dtype, says):
    problem = serving_problem(quantization, q_lora, on_cpu=on_cpu, amx=amx, dtype=dtype)
    assert (problem is None) if says is None else (says in problem), problem


def test_quantizers_round_trip():
    torch.manual_seed(0)
    weight = torch.randn(200, 300) * 0.05
    fp8, scale = block_fp8(weight, (64, 128))
    back = fp8.float() * scale.repeat_interleave(64, 0)[:200].repeat_interleave(128, 1)[:, :300]
    assert scale.shape == (4, 3) and (back - weight).abs().max() < 0.07 * weight.abs().max()
    int8, channel = int8_per_channel(weight)
    assert channel.shape == (200, 1) and ((int8.float() * channel) - weight).abs().max() \
        <= channel.max() * 0.5 + 1e-9


@pytest.mark.parametrize("quantization, q_lora, on_cpu, amx, dtype, message", [
    (Quantization("fp8-block", (128, 128)), 64, False, False, "bfloat16",
     "block FP8 [128, 128]: q_lora_rank 64 is not a multiple of block_n 128, so vLLM cannot "
     "load the scales of the fused q_a/kv_a projection; quantize with a block_n that divides "
     "q_lora_rank (e.g. [64, 64]), or serve the unquantized draft"),
    (Quantization("fp8-block", (128, 128)), 64, True, True, "bfloat16",
     "block FP8 [128, 128]: q_lora_rank 64 is not a multiple of block_n 128, so vLLM cannot "
     "load the scales of the fused q_a/kv_a projection; quantize with a block_n that divides "
     "q_lora_rank (e.g. [64, 128]), or serve the unquantized draft"),
    (Quantization("fp8-block", (64, 128)), 64, False, False, "bfloat16",
     "block FP8 [64, 128] on a GPU: vLLM quantizes the activations in groups of block_n (64) "
     "and its block-FP8 kernel reads groups of block_k (128), so start-up fails loading MLA "
     "attention; quantize with square blocks (DeepSeek and Kimi ship [128, 128]), or serve "
     "the unquantized draft"),
    (Quantization("fp8-block", (64, 128)), 64, True, False, "bfloat16",
     "block FP8 [64, 128] needs a CPU with AMX on vLLM's CPU build (it has no kernel "
     "otherwise); serve the unquantized draft here, or this one on a GPU"),
    (Quantization("int8-channel"), 64, True, False, "bfloat16",
     "compressed-tensors W8A8 int8 needs a CPU with AMX on vLLM's CPU build: elsewhere its "
     "oneDNN kernel keeps no weight for MLA attention to split kv_b_proj from, and loading "
     "fails; serve the unquantized draft here, or this one on a GPU"),
    (Quantization("int8-channel"), 64, True, True, "float32",
     "compressed-tensors W8A8 int8 needs bfloat16 or float16 activations on vLLM's CPU build "
     "and the engine is float32; serve with --dtype bfloat16, or serve the unquantized draft "
     "here, or this one on a GPU"),
    (Quantization("int8-channel"), 64, True, True, "float16", None),
    (Quantization("fp8-block", (64, 128)), None, True, True, "float16", None),
])
def test_each_refusal_says_what_to_do(quantization, q_lora, on_cpu, amx, dtype, message):
    assert serving_problem(quantization, q_lora, on_cpu=on_cpu, amx=amx, dtype=dtype) == message


@pytest.mark.parametrize("raw, found", [
    ({"quant_method": "FP8", "weight_block_size": [128, 64]}, Quantization("fp8-block", (128, 64))),
    ({"quant_method": "fp8", "weight_block_size": [64, 64], "activation_scheme": "dynamic"},
     Quantization("fp8-block", (64, 64))),
])
def test_the_block_and_the_method_are_read_as_written(raw, found):
    assert spec_from_config(config(raw)).quantization == found
    assert found.weight_dtype == "F8_E4M3"


@pytest.mark.parametrize("group", [
    {"weights": {"type": "int", "num_bits": 4, "strategy": "channel"},
     "input_activations": {"dynamic": True}},
    {"weights": {"type": "int", "num_bits": 8, "strategy": "tensor"},
     "input_activations": {"dynamic": True}},
    {"weights": {"type": "float", "num_bits": 8, "strategy": "channel"},
     "input_activations": {"dynamic": True}},
    {"weights": {"type": "int", "num_bits": 8, "strategy": "channel"},
     "input_activations": {"dynamic": False}},
    {"weights": {"type": "int", "num_bits": 8, "strategy": "channel"}},
    {"input_activations": {"dynamic": True}},
    {"weights": {"type": "int", "num_bits": 8, "strategy": "channel", "symmetric": False},
     "input_activations": {"dynamic": True}},
], ids=["4-bit", "per-tensor", "float", "static", "no-activations", "no-weights", "asymmetric"])
def test_other_compressed_tensors_schemes_are_left_to_vllm(group):
    raw = {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}}
    found = spec_from_config(config(raw), source="draft/config.json").quantization
    assert not found.loads_in_plugin_class
    assert found.words.startswith("compressed-tensors (group_0: ")


def test_two_groups_are_left_to_vllm():
    group = SCHEMES["int8-channel"](None)["config_groups"]["group_0"]
    raw = {"quant_method": "compressed-tensors", "config_groups": {"a": group, "b": group}}
    found = spec_from_config(config(raw)).quantization
    assert not found.loads_in_plugin_class
    assert re.match("compressed-tensors \\(a: .*; b: ", found.words)


def test_the_scheme_is_named_whatever_the_spelling_of_its_method():
    """vLLM reads quant_method case-blind, compressed_tensors as compressed-tensors; so do
    the plugin's decision and its words."""
    from vllm_kimi_eagle.draft.quantization import scheme_words

    group = SCHEMES["int8-channel"](None)["config_groups"]
    spelled = {"quant_method": "Compressed_Tensors", "config_groups": group}
    assert spec_from_config(config(spelled)).quantization == Quantization("int8-channel")
    assert scheme_words(spelled).startswith("compressed-tensors (group_0: weights int 8-bit")
    assert scheme_words({"quant_method": "FP8"}) == "fp8 per tensor, activation_scheme 'dynamic'"


@pytest.mark.parametrize("trained", ["eagle3", "eagle3.1", "eagle3-llama"])
def test_smoothing_keeps_the_draft_and_undoes_the_norms_factors(trained):
    """The quantized copies of the integer-activation schemes are smoothed first: the same
    function, and the seeded factors a trained draft's norms carry (up to 16 either way)
    cancel, so that an int8 grid over a token's activations keeps every channel."""
    from vllm_kimi_eagle.fixtures import sensitivity
    from vllm_kimi_eagle.fixtures.quantized import smoothed
    from vllm_kimi_eagle.fixtures.reference import ReferenceDraft

    spec = variants.trained_spec(trained)
    rope = dict(variants.ROPE if spec.attention == "mla" else variants.LLAMA_ROPE)
    torch.manual_seed(0)
    draft = ReferenceDraft(spec, rope)
    plain = {k: v.clone() for k, v in draft.state_dict().items()}
    sensitivity.scale_norms(draft, own_lm_head=False, seed=3)
    scaled = {k: v.clone() for k, v in draft.state_dict().items()}
    smooth = ReferenceDraft(spec, rope)
    smooth.load_state_dict(smoothed(scaled, spec))
    ids = torch.randint(0, spec.vocab_size, (2, 10))
    hidden = torch.randn(2, 8, spec.num_aux * spec.target_hidden_size)
    positions = torch.arange(8).expand(2, 8)
    with torch.no_grad():
        want = [draft.draft_logits(o) for o, _ in
                draft.unroll(ids, draft.combine(hidden), positions, 3)]
        got = [smooth.draft_logits(o) for o, _ in
               smooth.unroll(ids, smooth.combine(hidden), positions, 3)]
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, atol=1e-3, rtol=1e-3)
    spread = lambda w: (w.abs().max() / w.abs().min()).item()  # noqa: E731
    name = "layers.0.input_layernorm.weight"
    assert spread(scaled[name]) > 100
    assert spread(smoothed(scaled, spec)[name]) < 2 * spread(smoothed(plain, spec)[name])


def test_a_scheme_only_vllm_loads_is_refused_where_the_cpu_build_lacks_its_kernel():
    """W4A16 on vLLM's CPU build runs its cpu_gemm_wna16 op, which a build compiled
    without AVX-512 lacks: refused naming the kernel there, left to vLLM elsewhere."""
    from vllm_kimi_eagle.draft import quantization
    from vllm_kimi_eagle.fixtures.quantized import SCHEMES as WRITTEN

    w4a16 = quantization.quantization_from_config(WRITTEN["w4a16"](32))
    assert not w4a16.loads_in_plugin_class and w4a16.cpu_kernel == "cpu_gemm_wna16"
    missing = quantization.serving_problem(w4a16, 64, on_cpu=True, amx=False,
                                           dtype="bfloat16", has_cpu_op=lambda name: False)
    assert "cpu_gemm_wna16 kernel, which this build of vLLM does not have" in missing
    for on_cpu, has in ((True, True), (False, False)):
        assert quantization.serving_problem(w4a16, 64, on_cpu=on_cpu, amx=False,
                                            dtype="bfloat16",
                                            has_cpu_op=lambda name: has) is None
    nvfp4 = quantization.quantization_from_config({
        "quant_method": "compressed-tensors", "config_groups": {"g": {
            "weights": {"type": "float", "num_bits": 4, "strategy": "tensor_group"},
            "input_activations": {"type": "float", "num_bits": 4}}}})
    assert nvfp4.cpu_kernel is None
