"""The plugin's environment variables (vllm_kimi_eagle/settings.py): every switch read one
way, a bad value an error line and the default, never an exception."""

from __future__ import annotations

import pytest

from vllm_kimi_eagle import settings


@pytest.mark.parametrize("text", ["1", "true", "YES", " on "])
@pytest.mark.parametrize("setting", [settings.PLUGIN, settings.GREEDY_SHORTCUT,
                                     settings.CPU_MLA_VERIFY], ids=lambda s: s.name)
def test_every_switch_takes_the_same_on_words(setting, text):
    assert settings.read(setting, {setting.name: text}) == (True, None)


@pytest.mark.parametrize("text", ["0", "false", "No", "OFF"])
@pytest.mark.parametrize("setting", [settings.PLUGIN, settings.GREEDY_SHORTCUT,
                                     settings.CPU_MLA_VERIFY], ids=lambda s: s.name)
def test_every_switch_takes_the_same_off_words(setting, text):
    assert settings.read(setting, {setting.name: text}) == (False, None)


@pytest.mark.parametrize("setting, text", [
    (settings.PLUGIN, "disabled"),
    (settings.DRAFT, "off"),
    (settings.LAYER_IDS, "output"),
    (settings.DRAFT_ROPE_THETA, "-1"),
    (settings.DRAFT_ROPE_THETA, "nan"),
    (settings.GREEDY_SHORTCUT, "2"),
    (settings.CPU_MLA_VERIFY, "false!"),
], ids=lambda v: v if isinstance(v, str) else v.name)
def test_a_bad_value_is_one_line_and_the_default(setting, text):
    found, problem = settings.read(setting, {setting.name: text})
    assert found == setting.default
    assert problem.startswith(f"vllm-kimi-eagle: environment variable {setting.name}={text!r} "
                              f"is not {setting.takes}; it is ignored")
    assert "\n" not in problem
    assert settings.problems({setting.name: text}) == [problem]


def test_unset_and_empty_are_the_default():
    for setting in settings.SETTINGS:
        assert settings.read(setting, {}) == (setting.default, None)
        assert settings.read(setting, {setting.name: "  "}) == (setting.default, None)
    assert settings.problems({}) == []


def test_values():
    assert settings.value(settings.DRAFT, {"VLLM_KIMI_EAGLE_DRAFT": "Upstream"}) == "upstream"
    assert settings.value(settings.LAYER_IDS, {"VLLM_KIMI_EAGLE_LAYER_IDS": "output-of"}) == "output-of"
    assert settings.value(settings.DRAFT_ROPE_THETA,
                          {"VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA": "10000"}) == 10000.0


@pytest.mark.parametrize("setting, text, value", [
    (settings.DRAFT, " Upstream ", "upstream"),
    (settings.LAYER_IDS, "Output_Of_Layer", "output-of"),
    (settings.LAYER_IDS, "input-of", "input-of"),
    (settings.LAYER_IDS, "AUTO", "auto"),
    (settings.DRAFT_ROPE_THETA, "10000", 10000.0),
    (settings.DRAFT_ROPE_THETA, "1e-3", 0.001),
    (settings.DRAFT_NOPE, "on", True),
    (settings.UNCHECKED_RELEASE, "1", True),
], ids=lambda v: v if isinstance(v, str) else getattr(v, "name", str(v)))
def test_good_values_are_read(setting, text, value):
    assert settings.read(setting, {setting.name: text}) == (value, None)
    assert settings.value(setting, {setting.name: text}) == value


@pytest.mark.parametrize("text", ["0", "inf", "-inf", "ten"])
def test_a_rope_base_is_a_positive_finite_number(text):
    setting = settings.DRAFT_ROPE_THETA
    found, problem = settings.read(setting, {setting.name: text})
    assert found is None and "is not a positive number" in problem


@pytest.mark.parametrize("setting", settings.SETTINGS, ids=lambda s: s.name)
def test_unset_or_blank_is_the_default_without_a_word(setting):
    assert settings.read(setting, {}) == (setting.default, None)
    assert settings.read(setting, {setting.name: "  "}) == (setting.default, None)
    assert settings.problems({}) == []


def test_the_error_line_says_what_the_default_means():
    _, problem = settings.read(settings.DRAFT, {"VLLM_KIMI_EAGLE_DRAFT": "x"})
    assert problem == ("vllm-kimi-eagle: environment variable VLLM_KIMI_EAGLE_DRAFT='x' is not "
                       "plugin or upstream; it is ignored (the plugin's draft class serves the "
                       "MLA EAGLE3 drafts). Set it to plugin or upstream, or unset it.")
