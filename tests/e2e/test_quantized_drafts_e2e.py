"""Quantized copies of the base draft (vllm_kimi_eagle/fixtures/quantized.py), served by real
vLLM in bfloat16 (the quantized kernels of vLLM's CPU build take bfloat16 activations),
side by side with vLLM's in-tree class and against the unquantized draft's acceptance:

- block FP8 [64, 128] (block_n divides q_lora_rank 64): served at the unquantized draft's
  acceptance where vLLM's CPU build has a kernel for it (a CPU with AMX); refused in one
  line elsewhere;
- compressed-tensors W8A8 int8, smoothed first as a SmoothQuant recipe does (the tiny
  drafts' norms carry factors up to 16 either way, fixtures/sensitivity.py): served at the
  unquantized draft's acceptance on a CPU with AMX; refused in one line elsewhere, where
  vLLM's in-tree class fails loading it;
- block FP8 with q_a/kv_a left in float (an ignore list): vLLM's in-tree class serves it
  at acceptance 1.00, silently; the plugin refuses it before loading, naming the tensors;
- compressed-tensors W4A16 (int4 groups, llm-compressor's pack-quantized; smoothed too,
  as vLLM's CPU build quantizes its activations to int8 on a CPU with AMX): the plugin's
  class does not load it; vLLM's CPU build serves it with its own class, and the plugin
  hands it there by itself, as the switch VLLM_KIMI_EAGLE_DRAFT=upstream would.
"""

from __future__ import annotations

import os

import pytest

from tests import engines
from tests.helpers import engine, served
from vllm_kimi_eagle.cpu.cpu_mla_backend import amx_available
from vllm_kimi_eagle.fixtures.quantized import write_quantized_draft

pytestmark = pytest.mark.engine

# Acceptance length a quantized draft may lose against the unquantized one. In bfloat16 a
# near-tie flips with the batch shape, so the two serve different sequences and land
# either side of each other by up to about this much; a broken one falls far below.
TOLERANCE = 0.1


@pytest.fixture(scope="module")
def quantized(tiny, tmp_path_factory):
    folder = tmp_path_factory.mktemp("quantized")
    base = os.path.join(tiny, "draft")
    return {
        "fp8": write_quantized_draft(base, str(folder / "fp8"), "fp8-block", (64, 128)),
        "int8": write_quantized_draft(base, str(folder / "int8"), "int8-channel"),
        "fp8-partial": write_quantized_draft(base, str(folder / "fp8-partial"), "fp8-block",
                                             (64, 128), skip=("q_a_proj.weight",
                                                              "kv_a_proj_with_mqa.weight")),
        "w4a16": write_quantized_draft(base, str(folder / "w4a16"), "w4a16", group_size=32),
    }


WORDS = {"fp8": "block FP8 [64, 128]", "int8": "compressed-tensors W8A8 int8"}


# Each quantized copy through the plugin's route and through vLLM's class (the switch),
# bfloat16, beside the unquantized draft in bfloat16 (tests/engines.py).
PLUGIN, IN_TREE = engines.named("quantized@bf16"), engines.named("quantized@bf16+upstream")
UNQUANTIZED = engines.named("draft@bf16")


def serve(tiny, draft_folder, route=PLUGIN) -> dict:
    return engine(tiny, route, draft=draft_folder)


def figures(run: dict) -> str:
    if "error" in run:
        return f"refused/failed: {run['error'][:160]}"
    return f"{run['acceptance_length']} ({run['drafts']} drafts)"


@pytest.mark.parametrize("scheme", ["fp8", "int8"])
def test_a_quantized_draft_serves_at_the_unquantized_acceptance(tiny, quantized, scheme):
    ours = serve(tiny, quantized[scheme])
    print(f"\n{scheme}: plugin {figures(ours)}")
    if not amx_available():
        # Refused when vLLM builds its config, before an engine starts (the DraftRefusedError
        # of the hook), in one line naming the scheme and what to do.
        assert ours["error"].startswith("DraftRefusedError: "), ours["error"][:300]
        assert f"{WORDS[scheme]} needs a CPU with AMX on vLLM's CPU build" in ours["error"]
        assert "serve the unquantized draft here, or this one on a GPU" in ours["error"]
        assert "Loading weights took" not in ours["_log"]  # no weight was read
        if scheme == "int8":  # refused where vLLM's in-tree class cannot serve it either
            in_tree = serve(tiny, quantized[scheme], IN_TREE)
            print(f"{scheme}: in-tree {figures(in_tree)}")
            assert "error" in in_tree and "drafts" not in in_tree, figures(in_tree)
        return
    unquantized = served(engine(tiny, UNQUANTIZED))
    print(f"{scheme}: unquantized {figures(unquantized)}")
    in_tree = serve(tiny, quantized[scheme], IN_TREE)
    print(f"{scheme}: in-tree {figures(in_tree)}")
    for run in (served(ours), served(in_tree)):
        assert run["drafts"] > 0, "no draft proposed"
        assert run["acceptance_length"] >= unquantized["acceptance_length"] - TOLERANCE
    assert f"is {WORDS[scheme].split(' [')[0]}; its " \
           "scales are checked and loaded by the plugin's class" in ours["_log"]


def test_a_draft_with_layers_left_in_float_is_refused_not_served_wrong(tiny, quantized):
    ours = serve(tiny, quantized["fp8-partial"])
    print(f"\nfp8 with q_a/kv_a in float: plugin {figures(ours)}")
    assert "q_a_proj.weight' has dtype F32" in ours["error"]
    assert "kv_a_proj_with_mqa.weight' has dtype F32" in ours["error"]
    if amx_available():  # what vLLM alone makes of it, for the record
        in_tree = serve(tiny, quantized["fp8-partial"], IN_TREE)
        print(f"fp8 with q_a/kv_a in float: in-tree {figures(in_tree)}")


SPEC_FIGURES = ("token_ids", "acceptance_length", "acceptance_by_position", "drafts",
                "draft_tokens", "accepted_tokens")


def test_a_scheme_only_vllms_class_loads_is_handed_to_it_by_itself(tiny, quantized):
    """No switch set: the hook gives the W4A16 draft the name registered to vLLM's class,
    says so in one line, and the engine serves it exactly as with the switch (one variable:
    the switch), at the unquantized draft's acceptance (a draft whose int4 weights were
    scrambled gives 1.00 here)."""
    from vllm_kimi_eagle.compat.vllm_compat import has_cpu_op

    if not has_cpu_op("cpu_gemm_wna16"):
        # A CPU build without vLLM's int4 kernel (compiled for AVX-512 only): vLLM alone
        # stops at the engine's first step; the plugin refuses at start-up, in one line
        # naming the kernel, with the switch or without.
        for route in (PLUGIN, IN_TREE):
            refused = serve(tiny, quantized["w4a16"], route)
            print(f"\nw4a16 ({route.name}): {figures(refused)}")
            assert refused["error"].startswith("DraftRefusedError: "), refused["error"][:400]
            assert "cpu_gemm_wna16 kernel, which this build of vLLM does not have" in \
                refused["error"]
            assert "Loading weights took" not in refused["_log"]  # no weight was read
        return
    handed = served(serve(tiny, quantized["w4a16"]))
    chosen = served(serve(tiny, quantized["w4a16"], IN_TREE))
    unquantized = served(engine(tiny, UNQUANTIZED))
    print(f"\nw4a16: handed over {figures(handed)}, with the switch {figures(chosen)}, "
          f"unquantized {figures(unquantized)}")
    assert handed["drafts"] > 0, "no draft proposed"
    assert "is served by vLLM's in-tree draft class: its quantization is compressed-tensors " \
           "(group_0: weights int 4-bit group group 32" in handed["_log"]
    assert "Using CPUWNA16LinearKernel" in handed["_log"]  # vLLM's own int4 kernel
    assert {name: handed[name] for name in SPEC_FIGURES} == \
        {name: chosen[name] for name in SPEC_FIGURES}
    assert handed["acceptance_length"] >= unquantized["acceptance_length"] - TOLERANCE
