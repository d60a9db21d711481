"""The package's layout: the runtime vLLM imports in every process (the modules at the
package root) never imports the tools or the fixtures around it, and the strings vLLM and
the installer resolve (the registered draft class, the entry points) name real objects.

The runtime modules are read with ``ast``, not imported: an import inside a function
counts too, since vLLM may reach it in any process.
"""

from __future__ import annotations

import ast
import configparser
import importlib
import os

import pytest

from tests.helpers import REPO

PACKAGE = "vllm_kimi_eagle"
# The packages around the runtime; the runtime must not import them.
NOT_RUNTIME = (f"{PACKAGE}.tools", f"{PACKAGE}.fixtures")
DRAFT_CLASS = "vllm_kimi_eagle.draft_model:Eagle3DeepseekV2ForCausalLM"
# The lazy name vLLM's registry holds (draft_class_entry.py).
REGISTERED_NAME = "vllm_kimi_eagle.draft_class_entry:Eagle3DeepseekV2ForCausalLM"
PLUGIN_ENTRY_POINT = "vllm_kimi_eagle:register"


def runtime_modules() -> list[str]:
    """Every module directly in the package folder (not in its subpackages)."""
    folder = os.path.join(REPO, PACKAGE)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder)
                  if name.endswith(".py"))


def _is_outside_runtime(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in NOT_RUNTIME)


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every import of a module at the package root: ``import``,
    ``from ... import`` (absolute, or relative to the package), anywhere in the file, and
    ``importlib.import_module``/``__import__`` of a literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:  # relative to a module directly in the package
                parts = PACKAGE.split(".")[: max(0, 1 - (node.level - 1))]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.append((node.lineno, base))
            # `from vllm_kimi_eagle import tools` imports the subpackage itself.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("import_module", "__import__"))):
            found.append((node.lineno, node.args[0].value))
    return found


def forbidden_imports(path: str, source: str | None = None) -> list[str]:
    """``FILE:LINE imports MODULE`` for each import of the tools or the fixtures."""
    if source is None:
        with open(path) as f:
            source = f.read()
    tree = ast.parse(source, filename=path)
    return [f"{path}:{line} imports {module}" for line, module in imported_modules(tree)
            if _is_outside_runtime(module)]


@pytest.mark.parametrize("source", [
    "import vllm_kimi_eagle.tools.cli",
    "from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models",
    "from vllm_kimi_eagle import tools",
    "from .tools import vllm_server",
    "from . import fixtures",
    "def later():\n    from vllm_kimi_eagle.tools.spec_metrics import Scrape",
    "import importlib\nimportlib.import_module('vllm_kimi_eagle.fixtures.k25')",
], ids=["import", "from-import", "subpackage", "relative", "relative-subpackage",
        "in-function", "import_module"])
def test_the_check_finds_every_kind_of_import(source):
    problems = forbidden_imports("vllm_kimi_eagle/example.py", source)
    assert len(problems) >= 1 and problems[0].startswith("vllm_kimi_eagle/example.py:")


@pytest.mark.parametrize("source", [
    "from vllm_kimi_eagle.layer_ids import resolve_layer_ids",
    "from . import vllm_compat",
    "from .settings import value",
    "import vllm_kimi_eagle.toolsmith",
    "DRAFT = 'vllm_kimi_eagle.tools.cli'",  # a string, not an import
], ids=["absolute", "relative-subpackage", "relative-module", "similar-name", "a-string"])
def test_the_check_lets_the_runtime_import_itself(source):
    assert forbidden_imports("vllm_kimi_eagle/example.py", source) == []


def test_runtime_imports_neither_tools_nor_fixtures():
    modules = runtime_modules()
    assert os.path.join(REPO, PACKAGE, "__init__.py") in modules
    assert os.path.join(REPO, PACKAGE, "draft_model.py") in modules
    problems = [p for path in modules for p in forbidden_imports(path)]
    assert not problems, (
        "the runtime (vLLM imports it in every process) must not import the tools or "
        "the fixtures:\n" + "\n".join(problems))


def resolve(target: str):
    """The object a ``module:attribute`` string names (as vLLM and entry points do)."""
    module, _, attribute = target.partition(":")
    obj = importlib.import_module(module)
    for name in attribute.split("."):
        obj = getattr(obj, name)
    return obj


def test_registered_draft_class_resolves():
    from vllm_kimi_eagle.architectures import DRAFT_CLASS as registered

    assert registered == REGISTERED_NAME
    cls = resolve(REGISTERED_NAME)  # on a checked minor: the plugin's class
    assert f"{cls.__module__}:{cls.__qualname__}" == DRAFT_CLASS


def test_declared_entry_points_resolve():
    """setup.cfg's entry points (the plugin, the console script) name real callables."""
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    declared = {}
    for group, lines in config["options.entry_points"].items():
        for line in filter(None, (ln.strip() for ln in lines.splitlines())):
            name, _, target = (part.strip() for part in line.partition("="))
            declared[(group, name)] = target
    assert declared[("vllm.general_plugins", "kimi_eagle")] == PLUGIN_ENTRY_POINT
    import vllm_kimi_eagle

    assert resolve(PLUGIN_ENTRY_POINT) is vllm_kimi_eagle.register
    for (group, name), target in declared.items():
        assert callable(resolve(target)), (group, name, target)
