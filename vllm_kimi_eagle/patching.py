"""Wrapping a vLLM method in memory, once, with a clear warning when it is not there."""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_MARK = "_vllm_kimi_eagle_wrapped"


def wrap_method(
    location: tuple[str, str],
    method: str,
    make_wrapper: Callable[[Callable], Callable],
    consequence: str,
) -> bool:
    """Replace ``module.Class.method`` by ``make_wrapper(original)``, idempotently.

    ``location`` is (module, class) as declared in vllm_compat; ``consequence`` says in
    the warning what the user loses when the method is not found. Returns whether the
    wrapper is in place.
    """
    module_name, class_name = location
    try:
        importlib.import_module("vllm.config")  # several config modules are circular without it
        owner = getattr(importlib.import_module(module_name), class_name)
        original = getattr(owner, method)
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
    if getattr(original, _MARK, False):
        return True
    wrapper = make_wrapper(original)
    setattr(wrapper, _MARK, True)
    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", method)
    # Pickled by reference (vLLM ships draft hf_overrides to engine processes): the
    # wrapper must be found where the original was.
    wrapper.__qualname__ = getattr(original, "__qualname__", method)
    wrapper.__module__ = getattr(original, "__module__", module_name)
    wrapper.__doc__ = original.__doc__
    # A staticmethod stays one: called on an instance, a plain function would be bound.
    static = isinstance(inspect.getattr_static(owner, method), staticmethod)
    setattr(owner, method, staticmethod(wrapper) if static else wrapper)
    return True
