"""Whether the plugin's draft class may replace vLLM's on a minor it was not checked on.

There (``vllm_compat.support_verdict``) register() first checks the contract the class
relies on, as ``vllm_compat`` states it: the vLLM classes and functions it builds on still
take what it passes (``DRAFT_BUILDS_ON``), vLLM's own MLA draft class, which it replaces,
takes nothing new (``DRAFT_INTERFACE``), and the V1 proposer's isinstance check still names
the base class it derives from (``EAGLE3_DRAFT_CHECKED_IN``). Where the contract does not
hold, vLLM's class keeps serving and the config fixes stay.

The checks are pure functions over ``inspect.Signature``; ``contract_problems`` reads the
installed vLLM and never raises. It imports vLLM's model modules, so it is read only where
a draft is built or its class resolved (``draft_class_entry.py``, the speculative hook),
never in register(): a process without a draft pays nothing. Once per process
(``contract_problems_here``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import time
from collections.abc import Iterable

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.compat import vllm_compat

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_P = inspect.Parameter
_BY_POSITION = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_BY_KEYWORD = (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)
_VARIADIC = (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)


def call_problems(name: str, signature: inspect.Signature, positional: Iterable[str],
                  keywords: Iterable[str]) -> list[str]:
    """What keeps a call of ``name`` with these arguments (positional ones named as vLLM
    names them) from binding to ``signature`` as meant; one problem per parameter. A
    keyword that only ``**kwargs`` would take counts as gone: it may be dropped there."""
    parameters = list(signature.parameters.values())
    slots = [p for p in parameters if p.kind in _BY_POSITION]
    takes_more = any(p.kind is _P.VAR_POSITIONAL for p in parameters)
    problems, given = [], set()
    for index, expected in enumerate(positional):
        if index >= len(slots):
            if not takes_more:
                problems.append(f"{name} takes no parameter {expected!r} (argument "
                                f"{index + 1}) any more")
            continue
        given.add(slots[index].name)
        if slots[index].name != expected:
            problems.append(f"{name} takes {slots[index].name!r} as argument {index + 1}, "
                            f"where it took {expected!r}")
    by_name = {p.name: p for p in parameters}
    for keyword in keywords:
        given.add(keyword)
        if keyword not in by_name or by_name[keyword].kind not in _BY_KEYWORD:
            problems.append(f"{name} takes no parameter {keyword!r} any more")
    problems += [f"{name} takes a new required parameter {p.name!r}" for p in parameters
                 if p.kind not in _VARIADIC and p.default is _P.empty and p.name not in given]
    return problems


def interface_problems(name: str, signature: inspect.Signature, takes: Iterable[str]
                       ) -> list[str]:
    """The parameters of ``signature`` beyond ``takes``: ones vLLM may now pass."""
    return [f"{name} takes a new parameter {p.name!r}" for p in signature.parameters.values()
            if p.kind not in _VARIADIC and p.name not in takes]


def base_problems(base: object, named_there: object, where: str) -> list[str]:
    """Whether the class ours derives from is still the one the isinstance check at
    ``where`` names."""
    if not isinstance(base, type):
        return [f"{where}: the base class is not a class ({base!r})"]
    if named_there is not base:
        return [f"{where} no longer names {base.__module__}.{base.__qualname__} (the class "
                "its isinstance check accepts a draft by)"]
    return []


def kept_line(reported: str, problems: list[str]) -> str:
    """The one log line for a minor where the contract does not hold."""
    return (
        f"vllm-kimi-eagle: vLLM {reported} is not a release this plugin was checked on, and "
        f"what its draft class builds on moved there: {'; '.join(problems)}. So vLLM's "
        "in-tree class keeps serving the MLA EAGLE3 drafts (the plugin's class would fail); "
        "the config fixes stay. Serve on vLLM "
        f"{vllm_compat.OLDEST_CHECKED}-{vllm_compat.NEWEST_CHECKED} for the plugin's class, or "
        f"set {settings.DRAFT.name}=upstream to choose vLLM's class without this check.")


_GONE = object()


def _find(module: str, name: str, problems: list[str]):
    """The object ``module.name`` (dots: attributes), or _GONE with a problem saying so."""
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as err:
        problems.append(f"{module}.{name} is gone ({type(err).__name__}: {err})")
        return _GONE
    return found


def _signature(found, method: bool) -> inspect.Signature:
    signature = inspect.signature(found)
    if method:  # a function looked up on its class: drop self
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature


def _read_contract() -> list[str]:
    problems: list[str] = []
    for module, name, positional, keywords in vllm_compat.DRAFT_BUILDS_ON:
        found = _find(module, name, problems)
        if found is not _GONE and positional is not None:
            problems += call_problems(f"{module}.{name}", _signature(found, "." in name),
                                      positional, keywords)
    module, name = vllm_compat.IN_TREE_MLA_DRAFT
    if _find(module, name, problems) is not _GONE:
        for method, takes in vllm_compat.DRAFT_INTERFACE:
            found = _find(module, f"{name}.{method}", problems)
            if found is not _GONE:
                problems += interface_problems(f"{module}.{name}.{method}",
                                               _signature(found, True), takes)
    base = _find(*vllm_compat.EAGLE3_DRAFT_BASE, problems)
    named_there = _find(*vllm_compat.EAGLE3_DRAFT_CHECKED_IN, problems)
    if _GONE not in (base, named_there):
        problems += base_problems(base, named_there,
                                  f"{vllm_compat.EAGLE3_DRAFT_CHECKED_IN[0]} (the V1 proposer)")
    return problems


def contract_problems() -> list[str]:
    """Where the installed vLLM breaks the draft class's contract; empty where it holds.
    Never raises: a contract it cannot read is a problem too."""
    started = time.perf_counter()
    try:
        problems = _read_contract()
    except Exception as err:  # register() must never stop vLLM
        problems = [f"the contract could not be read ({type(err).__name__}: {err})"]
    logger.debug("vllm-kimi-eagle: the draft class's contract with vLLM read in %.2f s: %s",
                 time.perf_counter() - started, "; ".join(problems) or "it holds")
    return problems


def installed_verdict(environ=os.environ) -> vllm_compat.Verdict:
    """What the plugin does on the installed vLLM (``vllm_compat.support_verdict``), with
    VLLM_KIMI_EAGLE_UNCHECKED_RELEASE as ``environ`` sets it."""
    return vllm_compat.support_verdict(vllm_compat.installed_vllm_version_text(),
                                       settings.value(settings.UNCHECKED_RELEASE, environ))


@functools.cache
def contract_problems_here() -> tuple[str, ...]:
    """``contract_problems`` where this vLLM is one the plugin was not checked on (empty on
    a checked minor: nothing is read there), read once per process."""
    verdict = installed_verdict()
    if not (verdict.act and verdict.check_contract):
        return ()
    return tuple(contract_problems())
