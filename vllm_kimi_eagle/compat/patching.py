"""Every change the plugin makes to vLLM in memory, in one place, so that it can be undone.

``wrap_method`` wraps a method once, with a clear warning when it is not there;
``replace_attribute`` and ``set_item`` change an attribute or a registry entry;
``when_imported`` defers a change to the moment vLLM imports the module it touches, so that
a process that never imports it pays nothing. Each records what was there before, and
``restore()`` puts it all back (``register()`` calls it when it fails halfway, so that vLLM
runs as it would without the plugin).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import inspect
import logging
import sys
from collections.abc import Callable

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_MARK = "_vllm_kimi_eagle_wrapped"
_ABSENT = object()
# (restore function, its argument) for each change, oldest first.
_JOURNAL: list[tuple[Callable, tuple]] = []


def replace_attribute(owner, name: str, value) -> None:
    """``setattr(owner, name, value)``, journaled: restore() puts back what ``owner``
    itself held (or removes the attribute, where it was inherited or absent)."""
    previous = vars(owner).get(name, _ABSENT) if hasattr(owner, "__dict__") else \
        getattr(owner, name, _ABSENT)
    _JOURNAL.append((_put_back_attribute, (owner, name, previous)))
    setattr(owner, name, value)


def set_item(mapping, key, value) -> None:
    """``mapping[key] = value``, journaled."""
    _JOURNAL.append((_put_back_item, (mapping, key, mapping.get(key, _ABSENT))))
    mapping[key] = value


def remember_item(mapping, key) -> None:
    """Journal ``mapping[key]`` as it is now, before a call of vLLM's changes it."""
    _JOURNAL.append((_put_back_item, (mapping, key, mapping.get(key, _ABSENT))))


def when_imported(module_name: str, install: Callable[[], object]) -> None:
    """Run ``install()`` once ``module_name`` has been imported: now if it is, else right
    after the import that executes it, in whichever code imports it. Journaled: restore()
    withdraws a hook that has not fired (what ``install`` changed journals itself)."""
    if module_name in sys.modules:
        install()
        return
    finder = _AfterImport(module_name, install)
    sys.meta_path.insert(0, finder)
    _JOURNAL.append((_withdraw_finder, (finder,)))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: lets the other finders find ``name``, then runs ``install``
    after the module's code has run."""

    def __init__(self, name: str, install: Callable[[], object]):
        self.name, self.install = name, install

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        _withdraw_finder(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, install = spec.loader.exec_module, self.install

        def exec_module(module):
            execute(module)
            install()

        spec.loader.exec_module = exec_module
        return spec


def _withdraw_finder(finder) -> None:
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


def mark() -> int:
    """How many changes are journaled now; ``restore(since=mark())`` undoes later ones."""
    return len(_JOURNAL)


def restore(since: int = 0) -> int:
    """Undo every journaled change made after ``since`` (all of them by default), newest
    first; returns how many there were."""
    undone = 0
    while len(_JOURNAL) > since:
        put_back, arguments = _JOURNAL.pop()
        put_back(*arguments)
        undone += 1
    return undone


def _put_back_attribute(owner, name, previous) -> None:
    if previous is _ABSENT:
        if name in getattr(owner, "__dict__", {}):
            delattr(owner, name)
    else:
        setattr(owner, name, previous)


def _put_back_item(mapping, key, previous) -> None:
    if previous is _ABSENT:
        mapping.pop(key, None)
    else:
        mapping[key] = previous


def wrap_method(
    location: tuple[str, str],
    method: str,
    make_wrapper: Callable[[Callable], Callable],
    consequence: str,
) -> bool:
    """Replace ``module.Class.method`` by ``make_wrapper(original)``, idempotently.

    ``location`` is (module, class) as declared in vllm_compat; ``consequence`` says in
    the warning what the user loses when the method is not found (or is a property or
    another descriptor, which is refused). Returns whether the wrapper is in place.
    """
    module_name, class_name = location
    try:
        importlib.import_module("vllm.config")  # several config modules are circular without it
        owner = getattr(importlib.import_module(module_name), class_name)
        static = inspect.getattr_static(owner, method)
    except (ImportError, AttributeError) as err:
        logger.warning(
            "vllm-kimi-eagle: cannot find %s.%s.%s (%s); %s Please report it with your "
            "vLLM version.",
            module_name,
            class_name,
            method,
            err,
            consequence,
        )
        return False
    kind = _KINDS.get(type(static), "function" if inspect.isfunction(static) else None)
    if kind is None:  # a property or another descriptor: its behaviour is not a call
        logger.warning(
            "vllm-kimi-eagle: %s.%s.%s is a %s, not a method the plugin can wrap; %s "
            "Please report it with your vLLM version.",
            module_name, class_name, method, type(static).__name__, consequence)
        return False
    original = static if kind == "function" else static.__func__
    # The wrappers already around the method, by their maker: one of each, another may
    # wrap it too (the CPU runner's load_model carries the memory mend and the self-check).
    marks = getattr(original, _MARK, frozenset())
    maker = f"{make_wrapper.__module__}.{make_wrapper.__qualname__}"
    if maker in marks:
        return True
    wrapper = make_wrapper(original)
    setattr(wrapper, _MARK, marks | {maker})
    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", method)
    # Pickled by reference (vLLM ships draft hf_overrides to engine processes): the
    # wrapper must be found where the original was.
    wrapper.__qualname__ = getattr(original, "__qualname__", method)
    wrapper.__module__ = getattr(original, "__module__", module_name)
    wrapper.__doc__ = original.__doc__
    # A static or class method stays one: ``make_wrapper`` gets the plain function (for a
    # class method it takes the class first, as an instance method takes self).
    replace_attribute(owner, method, _KIND_WRAP[kind](wrapper))
    return True


_KINDS = {staticmethod: "static", classmethod: "class"}
_KIND_WRAP = {"function": lambda f: f, "static": staticmethod, "class": classmethod}
