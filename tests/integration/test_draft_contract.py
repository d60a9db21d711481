"""The draft class against what the installed vLLM's proposers use on a draft.

Our ``Eagle3DeepseekV2ForCausalLM`` derives from a vLLM class only to pass the
proposer's isinstance check (vllm_compat.EAGLE3_DRAFT_BASE), so anything the proposer
reaches on the draft that our class does not define runs the base's code. This test
reads, from the installed vLLM's sources (not from a list of ours), every attribute the
EAGLE proposers use on the draft model:

- the V1 proposer: the modules of ``EagleProposer``'s class hierarchy
  (v1/spec_decode/eagle.py, llm_base_proposer.py);
- the V2 speculator (Model Runner V2, the GPU default from 0.29): the modules of
  ``EagleSpeculator``'s class hierarchy (v1/worker/gpu/spec_decode/speculator.py,
  target_dependent_ar/, eagle/) and the EAGLE loader (eagle/utils.py);

and asserts that our class defines each one itself (in its class body or its
``__init__``), and that every call the proposers make binds to our signature.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import pytest

# Where the installed vLLM drives an EAGLE3 draft: (module, class) roots whose class
# hierarchy is read, and loader modules read whole.
V1_ROOT = ("vllm.v1.spec_decode.eagle", "EagleProposer")
V2_ROOT = ("vllm.v1.worker.gpu.spec_decode.eagle.speculator", "EagleSpeculator")
V2_LOADER = "vllm.v1.worker.gpu.spec_decode.eagle.utils"
# Names the draft is called in the loader functions.
DRAFT_NAMES = {"eagle_model", "draft_model", "eagle"}
# What the proposers use that our class rightly does not define, and why. A name a new
# vLLM release adds fails the test until someone reads what it is for.
NOT_NEEDED = {
    "__class__": "Python's own",
    "mask_hidden": "parallel drafting only (PARD/DFlash drafts), not EAGLE3",
}


def _modules(root: tuple[str, str], extra: tuple[str, ...] = ()) -> list:
    module_name, class_name = root
    cls = getattr(importlib.import_module(module_name), class_name)
    names = [c.__module__ for c in cls.__mro__ if c.__module__.startswith("vllm.")]
    return [importlib.import_module(n) for n in dict.fromkeys([*names, *extra])]


def _is_draft(node: ast.AST) -> bool:
    """`self.model` or a loader variable holding the draft."""
    if isinstance(node, ast.Attribute):
        return node.attr == "model" and isinstance(node.value, ast.Name) \
            and node.value.id == "self"
    return isinstance(node, ast.Name) and node.id in DRAFT_NAMES


class DraftUses(ast.NodeVisitor):
    """Attributes read on the draft, and the calls made to it.

    A call with ``**name`` is checked once per dict literal bound to ``name`` in that
    module (``model_kwargs = {...}`` or ``dict(...)``, keys added by
    ``model_kwargs["key"] = ...`` in the same function included): vLLM builds the
    forward keywords that way, sometimes in a helper that returns them.
    """

    def __init__(self):
        self.attributes: dict[str, set[str]] = {}  # name -> modules using it
        self.guarded: set[str] = set()  # read with getattr/hasattr defaults only
        self.calls: list[tuple[str, int, frozenset[str], str]] = []
        self.module = ""
        self._dicts: dict[str, list[set[str]]] = {}  # variable -> literal key sets
        self._in_function: dict[str, set[str]] = {}
        self._pending: list[tuple[str, int, frozenset[str], str]] = []  # (method, n, kw, var)

    def _use(self, name: str) -> None:
        self.attributes.setdefault(name, set()).add(self.module)

    def visit_module(self, module) -> None:
        self.module, self._dicts, self._pending = module.__name__, {}, []
        self.visit(ast.parse(inspect.getsource(module)))
        for method, positional, keywords, var in self._pending:
            for keys in self._dicts.get(var, []):
                self.calls.append((method, positional, keywords | frozenset(keys), self.module))

    def visit_FunctionDef(self, node):
        self._in_function = {}
        self.generic_visit(node)

    def visit_Assign(self, node):
        for target in node.targets:
            keys = None
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                keys = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
            elif (isinstance(target, ast.Name) and isinstance(node.value, ast.Call)
                  and getattr(node.value.func, "id", "") == "dict"):
                keys = {k.arg for k in node.value.keywords if k.arg}
            if keys is not None:
                self._dicts.setdefault(target.id, []).append(keys)
                self._in_function[target.id] = keys
            elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                  and target.value.id in self._in_function
                  and isinstance(target.slice, ast.Constant)):
                self._in_function[target.value.id].add(target.slice.value)
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if _is_draft(node.value):
            self._use(node.attr)
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if (isinstance(func, ast.Name) and func.id in ("getattr", "hasattr")
                and len(node.args) > 1 and _is_draft(node.args[0])
                and isinstance(node.args[1], ast.Constant)):
            self._use(node.args[1].value)
            self.guarded.add(node.args[1].value)
        if (isinstance(func, ast.Name) and func.id.startswith("supports_")
                and node.args and _is_draft(node.args[0])):
            # vLLM's interface checks: getattr(model, "supports_...", False)
            self._use(func.id)
            self.guarded.add(func.id)
        method = None
        if isinstance(func, ast.Attribute) and _is_draft(func.value):
            method = func.attr
        elif _is_draft(func):
            method = "forward"
        if method and not any(isinstance(a, ast.Starred) for a in node.args):
            keywords = frozenset(k.arg for k in node.keywords if k.arg)
            expanded = [k.value.id for k in node.keywords
                        if k.arg is None and isinstance(k.value, ast.Name)]
            if expanded:
                self._pending += [(method, len(node.args), keywords, v) for v in expanded]
            else:
                self.calls.append((method, len(node.args), keywords, self.module))
        self.generic_visit(node)


def draft_uses(modules) -> DraftUses:
    uses = DraftUses()
    for module in modules:
        uses.visit_module(module)
    return uses


def _ours():
    from vllm_kimi_eagle.serving.draft_model import Eagle3DeepseekV2ForCausalLM

    return Eagle3DeepseekV2ForCausalLM


def _defined_by_ours() -> set[str]:
    """Names our class defines itself: its class body, and `self.X =` in __init__."""
    cls = _ours()
    names = set(vars(cls))
    init = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    for node in ast.walk(init):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id == "self"):
            names.add(node.attr)
    return names


PROPOSERS = {
    "V1 proposer": lambda: _modules(V1_ROOT),
    "V2 speculator": lambda: _modules(V2_ROOT, (V2_LOADER,)),
}


@pytest.fixture(scope="module", params=sorted(PROPOSERS))
def uses(request):
    try:
        modules = PROPOSERS[request.param]()
    except (ImportError, AttributeError) as err:
        pytest.fail(f"{request.param}: cannot find its sources in this vLLM ({err}); "
                    "update V1_ROOT/V2_ROOT in this test from the release's sources")
    return request.param, modules, draft_uses(modules)


def test_proposer_reads_nothing_our_class_inherits(uses):
    proposer, modules, found = uses
    from vllm import __version__

    ours, cls = _defined_by_ours(), _ours()
    # Inherited: our class lacks it but its base has it, so the base's code would run.
    # A name nothing defines is fine only where vLLM reads it with a default.
    missing = {name: sorted(where) for name, where in found.attributes.items()
               if name not in ours and name not in NOT_NEEDED
               and (hasattr(cls, name) or name not in found.guarded)}
    print(f"\nvLLM {__version__} {proposer} ({', '.join(m.__name__ for m in modules)}) "
          f"uses on the draft: {sorted(found.attributes)}")
    assert found.attributes, "no draft attribute found: the source reading is broken"
    assert not missing, (
        f"{proposer} uses these on the draft, which our class does not define itself "
        f"(so the base class's code would run): {missing}"
    )


def test_every_call_binds_to_our_signature(uses):
    proposer, _, found = uses
    cls = _ours()
    problems = []
    for name, positional, keywords, module in found.calls:
        method = getattr(cls, name, None)
        if method is None or name in NOT_NEEDED:
            continue
        signature = inspect.signature(method)
        try:
            signature.bind(None, *([None] * positional), **{k: None for k in keywords})
        except TypeError as err:
            problems.append(f"{module}: {name}({positional} positional, {sorted(keywords)}): {err}")
    calls = sorted({(c[0], c[1], tuple(sorted(c[2]))) for c in found.calls})
    print(f"\n{proposer} calls on the draft: {calls}")
    assert any(c[0] == "forward" and c[2] for c in found.calls), "no forward call found"
    assert not problems, "\n".join(problems)


def test_our_signatures_accept_what_vllms_own_mla_draft_accepts():
    """vLLM's in-tree MLA draft is written against the same proposers: every keyword its
    methods take, ours take too."""
    theirs = pytest.importorskip("vllm.model_executor.models.deepseek_eagle3")
    cls = _ours()
    for name in ("forward", "compute_logits", "combine_hidden_states", "embed_input_ids",
                 "get_top_tokens", "load_weights"):
        their_params = inspect.signature(getattr(theirs.Eagle3DeepseekV2ForCausalLM, name)).parameters
        our_sig = inspect.signature(getattr(cls, name))
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in our_sig.parameters.values())
        for param in their_params.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.name == "self":
                continue
            assert param.name in our_sig.parameters or takes_kwargs, (name, param.name)


def test_class_attributes_vllm_reads_on_the_draft_class_are_ours():
    """The model loader reads packed_modules_mapping to match fused layers in quantized
    checkpoints; an inherited Llama mapping (qkv_proj) would name layers we lack."""
    cls = _ours()
    assert "packed_modules_mapping" in vars(cls)
    params = set()
    for fused, parts in cls.packed_modules_mapping.items():
        params.add(fused)
        assert parts, fused
    from vllm_kimi_eagle.serving.draft_model import STACKED_PARAMS

    fused_in_module = {dest.rsplit(".", 1)[-1] for dest, _ in STACKED_PARAMS.values()}
    assert params == fused_in_module
