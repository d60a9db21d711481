"""Every change the plugin makes to vLLM, journaled and undone (vllm_kimi_eagle/compat/patching.py),
on stand-in classes and registries: each kind of change, each kind of method, and what is
refused."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from vllm_kimi_eagle.compat import patching

MODULE = "vllm_kimi_eagle_patching_probe"


class Base:
    def inherited(self):
        return "base"


def make_owner():
    class Owner(Base):
        def method(self, x):
            return ("method", x)

        @staticmethod
        def static(x):
            return ("static", x)

        @classmethod
        def klass(cls, x):
            return ("class", cls.__name__, x)

        @property
        def prop(self):
            return "prop"

    return Owner


@pytest.fixture
def owner():
    """A fresh class in a module of its own (wrap_method finds classes by module name),
    and nothing left journaled afterwards."""
    module = types.ModuleType(MODULE)
    module.Owner = make_owner()
    sys.modules[MODULE] = module
    start = patching.mark()
    yield module.Owner
    patching.restore(since=start)
    del sys.modules[MODULE]


def tagging(original):
    def wrapper(*args, **kwargs):
        return ("wrapped", original(*args, **kwargs))

    return wrapper


@pytest.mark.parametrize("name, call, expected", [
    ("method", lambda o: o().method(1), ("method", 1)),
    ("static", lambda o: o.static(2), ("static", 2)),
    ("klass", lambda o: o.klass(3), ("class", "Owner", 3)),
])
def test_each_kind_of_method_is_wrapped_kept_and_undone(owner, name, call, expected):
    kind = type(vars(owner)[name])
    start = patching.mark()
    assert patching.wrap_method((MODULE, "Owner"), name, tagging, "nothing lost")
    assert call(owner) == ("wrapped", expected)
    assert type(vars(owner)[name]) is kind  # a static or class method stays one
    # Idempotent: a second install finds its own wrapper and changes nothing.
    assert patching.wrap_method((MODULE, "Owner"), name, tagging, "nothing lost")
    assert call(owner) == ("wrapped", expected) and patching.mark() == start + 1
    assert patching.restore(since=start) == 1
    assert call(owner) == expected


def test_a_property_or_a_missing_place_is_refused_with_a_warning(owner, caplog):
    caplog.set_level(logging.WARNING, logger="vllm.vllm_kimi_eagle.compat.patching")
    start = patching.mark()
    assert not patching.wrap_method((MODULE, "Owner"), "prop", tagging, "LOST-A")
    assert not patching.wrap_method((MODULE, "Nobody"), "method", tagging, "LOST-B")
    assert not patching.wrap_method(("no_such_module_xyz", "Owner"), "m", tagging, "LOST-C")
    assert owner().prop == "prop" and patching.mark() == start
    messages = " ".join(r.getMessage() for r in caplog.records)
    for lost in ("LOST-A", "LOST-B", "LOST-C"):
        assert lost in messages


def test_attributes_and_items_are_put_back_as_they_were(owner):
    registry = {"kept": 1}
    start = patching.mark()
    patching.replace_attribute(owner, "method", lambda self, x: "replaced")
    patching.replace_attribute(owner, "inherited", lambda self: "shadow")
    patching.set_item(registry, "kept", 2)
    patching.set_item(registry, "new", 3)
    patching.remember_item(registry, "later")
    registry["later"] = 4  # a change made by someone else after remember_item
    assert owner().method(0) == "replaced" and owner().inherited() == "shadow"
    assert patching.restore(since=start) == 5
    assert owner().method(0) == ("method", 0)
    assert "inherited" not in vars(owner) and owner().inherited() == "base"
    assert registry == {"kept": 1}


def test_restore_undoes_newest_first_and_only_after_the_mark(owner):
    registry = {}
    patching.set_item(registry, "k", "first")
    middle = patching.mark()
    patching.set_item(registry, "k", "second")
    patching.set_item(registry, "k", "third")
    assert patching.restore(since=middle) == 2
    assert registry == {"k": "first"}


def test_when_imported_runs_after_the_module_executes_and_restore_withdraws_it(tmp_path,
                                                                              monkeypatch):
    """A change deferred to a module's import runs once that module's code has run (it
    sees what the module defines), in the import that executes it; one not yet fired is
    withdrawn by restore(); one for a module already imported runs at once."""
    import sys

    for name in ("kimi_deferred_a", "kimi_deferred_b"):
        (tmp_path / f"{name}.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    start = patching.mark()
    patching.when_imported("kimi_deferred_a",
                           lambda: seen.append(sys.modules["kimi_deferred_a"].VALUE + 1))
    patching.when_imported("kimi_deferred_b", lambda: seen.append("b"))
    assert seen == []
    import kimi_deferred_a  # noqa: F401
    assert seen == [42]
    patching.restore(since=start)  # b's hook never fired: withdrawn
    import kimi_deferred_b  # noqa: F401
    assert seen == [42]
    assert not any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)
    patching.when_imported("kimi_deferred_b", lambda: seen.append("now"))
    assert seen == [42, "now"]
    for name in ("kimi_deferred_a", "kimi_deferred_b"):
        sys.modules.pop(name, None)
