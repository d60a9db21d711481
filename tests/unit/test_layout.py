"""The package's layout: the runtime vLLM imports in every process never imports the
tools or the fixtures around it; its groups import only downward (``compat`` at the
bottom, then ``draft`` and ``cpu``, then ``serving``), and so do the tools' shared
helpers; no module imports itself back through others; and the strings vLLM and the
installer resolve (the registered draft class, the entry points) name real objects.

The modules are read with ``ast``, not imported: an import inside a function counts too,
since vLLM may reach it in any process.
"""

from __future__ import annotations

import ast
import configparser
import functools
import importlib
import os

import pytest

from tests.helpers import REPO

PACKAGE = "vllm_kimi_eagle"
# The packages around the runtime; the runtime must not import them.
NOT_RUNTIME = (f"{PACKAGE}.tools", f"{PACKAGE}.fixtures")
DRAFT_CLASS = "vllm_kimi_eagle.serving.draft_model:Eagle3DeepseekV2ForCausalLM"
# The lazy name vLLM's registry holds (draft_class_entry.py).
REGISTERED_NAME = "vllm_kimi_eagle.serving.draft_class_entry:Eagle3DeepseekV2ForCausalLM"
PLUGIN_ENTRY_POINT = "vllm_kimi_eagle:register"


# What each group of the runtime, and of the tools' shared helpers, may import besides
# itself: the layers, from the bottom up. The package's __init__.py (register()) sits on top.
MAY_IMPORT = {
    "settings": (),
    "compat": ("settings",),
    "draft": ("compat", "settings"),
    "cpu": ("compat", "settings"),
    "serving": ("draft", "cpu", "compat", "settings"),
    "tools.figures": ("compat",),
    "tools.models": ("draft",),
    "tools.engines": ("tools.figures", "compat"),
}


def module_name(path: str, repo: str = REPO) -> str:
    relative = os.path.relpath(path, repo)[: -len(".py")].replace(os.sep, ".")
    return relative.removesuffix(".__init__")


def package_files(*parts: str, repo: str = REPO) -> list[str]:
    """Every .py file under the package folder PARTS, subpackages included."""
    top = os.path.join(repo, PACKAGE, *parts)
    return sorted(os.path.join(folder, name) for folder, _, names in os.walk(top)
                  for name in names if name.endswith(".py"))


def runtime_modules() -> list[str]:
    """The runtime: every module of the package but the tools and the fixtures."""
    outside = tuple(os.path.join(REPO, *name.split(".")) + os.sep for name in NOT_RUNTIME)
    return [path for path in package_files() if not path.startswith(outside)]


def group_of(module: str) -> str | None:
    """The MAY_IMPORT group a module of the package belongs to (None: the package's own
    __init__, or a module outside every group)."""
    inside = module.removeprefix(PACKAGE + ".")
    return next((g for g in sorted(MAY_IMPORT, key=len, reverse=True)
                 if inside == g or inside.startswith(g + ".")), None)


def _is_outside_runtime(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in NOT_RUNTIME)


def imported_modules(tree: ast.AST, package: str = PACKAGE) -> list[tuple[int, str]]:
    """(line, module) for every import in a module of ``package``: ``import``,
    ``from ... import`` (absolute, or relative to ``package``), anywhere in the file, and
    ``importlib.import_module``/``__import__`` of a literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolved_base(node, package)
            found.append((node.lineno, base))
            # `from vllm_kimi_eagle import tools` imports the subpackage itself.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("import_module", "__import__"))):
            found.append((node.lineno, node.args[0].value))
    return found


def resolved_base(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` reads from: absolute, or relative to ``package``."""
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    parts = parts[: max(0, len(parts) - (node.level - 1))]
    return ".".join(parts + ([node.module] if node.module else []))


def named_imports(path: str, repo: str = REPO) -> set[str]:
    """Each name the file at PATH imports as such: ``import A.B`` gives A.B, ``from A
    import B`` gives A.B (a module, a subpackage or another name of A)."""
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = resolved_base(node, package_of(path, repo))
            named |= {f"{base}.{alias.name}" for alias in node.names}
    return named


def package_of(path: str, repo: str = REPO) -> str:
    """The package a file belongs to (for an __init__.py, its own), from its path: absolute
    under REPO, or relative to it."""
    relative = os.path.relpath(path, repo) if os.path.isabs(path) else path
    return ".".join(relative.split(os.sep)[:-1])


def forbidden_imports(path: str, source: str | None = None) -> list[str]:
    """``FILE:LINE imports MODULE`` for each import of the tools or the fixtures."""
    if source is None:
        with open(path) as f:
            source = f.read()
    tree = ast.parse(source, filename=path)
    return [f"{path}:{line} imports {module}"
            for line, module in imported_modules(tree, package_of(path))
            if _is_outside_runtime(module)]


@pytest.mark.parametrize("source", [
    "import vllm_kimi_eagle.tools.cli",
    "from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models",
    "from vllm_kimi_eagle import tools",
    "from .tools import vllm_server",
    "from . import fixtures",
    "def later():\n    from vllm_kimi_eagle.tools.figures.spec_metrics import Scrape",
    "import importlib\nimportlib.import_module('vllm_kimi_eagle.fixtures.k25')",
], ids=["import", "from-import", "subpackage", "relative", "relative-subpackage",
        "in-function", "import_module"])
def test_the_check_finds_every_kind_of_import(source):
    problems = forbidden_imports("vllm_kimi_eagle/example.py", source)
    assert len(problems) >= 1 and problems[0].startswith("vllm_kimi_eagle/example.py:")


@pytest.mark.parametrize("source", ["from ..tools import vllm_server",
                                    "from ..fixtures.cache import ensure_tiny_models"])
def test_a_relative_import_is_read_from_the_files_own_package(source):
    problems = forbidden_imports(os.path.join("vllm_kimi_eagle", "serving", "x.py"), source)
    assert problems and all(" imports vllm_kimi_eagle.tools" in p
                            or " imports vllm_kimi_eagle.fixtures" in p for p in problems)


@pytest.mark.parametrize("source", [
    "from vllm_kimi_eagle.draft.layer_ids import resolve_layer_ids",
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
    assert os.path.join(REPO, PACKAGE, "serving", "draft_model.py") in modules
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
    from vllm_kimi_eagle.draft.architectures import DRAFT_CLASS as registered

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


def imports_of(path: str, repo: str = REPO) -> set[str]:
    """The package's modules that the file at PATH imports. Packages are left out: their
    __init__.py files hold a docstring, and ``from PACKAGE import module`` names the module."""
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    name = module_name(path, repo)
    return {module for _, module in imported_modules(tree, package_of(path, repo))
            if module in package_modules(repo) and module != name}


@functools.cache
def package_modules(repo: str = REPO) -> frozenset[str]:
    """Every module of the package under REPO, packages (__init__.py) left out."""
    return frozenset(module_name(p, repo) for p in package_files(repo=repo)
                     if not p.endswith("__init__.py"))


@functools.cache
def package_folders(repo: str = REPO) -> frozenset[str]:
    """Every package (folder with an __init__.py) of the package under REPO."""
    return frozenset(module_name(p, repo) for p in package_files(repo=repo)
                     if p.endswith("__init__.py"))


def group_folders_imported(path: str, repo: str = REPO) -> set[str]:
    """The subpackages of a group the file at PATH imports as such (``from vllm_kimi_eagle
    import serving``), which imports_of leaves out with the other packages."""
    return {name for name in named_imports(path, repo)
            if name in package_folders(repo) and group_of(name) is not None}


def root_imports(path: str, repo: str = REPO) -> set[str]:
    """What the file at PATH takes from the package root itself (its __init__.py, which
    sits on top of every group): ``import vllm_kimi_eagle``, or ``from vllm_kimi_eagle
    import NAME`` where NAME is not one of its modules or subpackages."""
    known = package_modules(repo) | package_folders(repo)
    return {name for name in named_imports(path, repo) if name == PACKAGE or (
        name.rpartition(".")[0] == PACKAGE and name not in known)}


def upward_imports(paths: list[str], repo: str = REPO) -> list[str]:
    """``MODULE imports OTHER`` for each import that leaves the module's group for one the
    group may not import (MAY_IMPORT), for a module of the package in no group, or for
    the package root itself."""
    problems = []
    for path in paths:
        module = module_name(path, repo)
        group = group_of(module)
        if group is None:
            continue
        for other in sorted(imports_of(path, repo) | group_folders_imported(path, repo)):
            theirs = group_of(other)
            if theirs != group and theirs not in MAY_IMPORT[group]:
                problems.append(f"{module} ({group}) imports {other} ({theirs})")
        problems += [f"{module} ({group}) imports {name} (the package root, on top)"
                     for name in sorted(root_imports(path, repo))]
    return problems


def test_the_groups_import_only_downward():
    paths = [p for p in package_files() if group_of(module_name(p))]
    assert {group_of(module_name(p)) for p in paths} == set(MAY_IMPORT)
    problems = upward_imports(paths)
    assert not problems, "imports that run back up (tests/unit/test_layout.py MAY_IMPORT):\n" \
        + "\n".join(problems)


def test_an_import_back_up_is_named(tmp_path):
    """The check above, shown failing: a module of ``draft`` importing ``serving``, and a
    module of the package in no group (relatively)."""
    folder = tmp_path / PACKAGE / "draft"
    folder.mkdir(parents=True)
    (tmp_path / PACKAGE / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "serving").mkdir()
    (tmp_path / PACKAGE / "serving" / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "serving" / "hook.py").write_text("")
    (folder / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "fixtures").mkdir()
    (tmp_path / PACKAGE / "fixtures" / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "fixtures" / "cache.py").write_text("")
    (folder / "record.py").write_text("from ..fixtures import cache\n\n\ndef later():\n"
                                      "    from vllm_kimi_eagle.serving import hook\n")
    (folder / "rooted.py").write_text("import vllm_kimi_eagle\nfrom .. import register\n"
                                      "from vllm_kimi_eagle import serving\n")
    problems = upward_imports([str(folder / "record.py"), str(folder / "rooted.py")],
                              repo=str(tmp_path))
    assert problems == ["vllm_kimi_eagle.draft.record (draft) imports "
                        "vllm_kimi_eagle.fixtures.cache (None)",
                        "vllm_kimi_eagle.draft.record (draft) imports "
                        "vllm_kimi_eagle.serving.hook (serving)",
                        "vllm_kimi_eagle.draft.rooted (draft) imports "
                        "vllm_kimi_eagle.serving (serving)",
                        "vllm_kimi_eagle.draft.rooted (draft) imports vllm_kimi_eagle (the "
                        "package root, on top)",
                        "vllm_kimi_eagle.draft.rooted (draft) imports "
                        "vllm_kimi_eagle.register (the package root, on top)"]


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Each import circle of GRAPH (module -> the modules it imports), as A -> B -> A."""
    done, stack, found = set(), [], []

    def visit(node):
        if node in stack:
            found.append(" -> ".join(stack[stack.index(node):] + [node]))
            return
        if node in done:
            return
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            visit(other)
        stack.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    return found


def test_no_module_or_folder_of_the_package_imports_itself_back():
    """No circle of imports anywhere in the package (tools and fixtures included): between
    modules, nor between folders (two tools whose modules import each other's)."""
    modules = {module_name(p): imports_of(p) for p in package_files()}
    folders: dict[str, set[str]] = {}
    for module, imported in modules.items():
        folder = module.rpartition(".")[0]
        folders.setdefault(folder, set()).update(
            other.rpartition(".")[0] for other in imported
            if other.rpartition(".")[0] != folder)
    found = circles(modules) + circles(folders)
    assert not found, "import circles:\n" + "\n".join(found)


def test_a_circle_is_named():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
    assert circles({"a": {"b"}, "b": set()}) == []
