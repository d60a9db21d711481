"""The greedy shortcut through real ``EngineArgs(...).create_engine_config()`` of the
installed vLLM, where a GPU user's speculative config is parsed (the decision
itself: tests/unit/test_shortcut_policy.py).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_python, write_config_only_models
from vllm_kimi_eagle.serving.shortcut_policy import FLAG, SHORTCUT_ENV


BUILD_CONFIGS = """
import json, os
from vllm.engine.arg_utils import EngineArgs
results = {{}}
for name, extra, env in {cases!r}:
    os.environ.pop({env_name!r}, None)
    os.environ.update(env)
    spec = {{"method": "eagle3", "model": {draft!r}, "num_speculative_tokens": 3, **extra}}
    try:
        config = EngineArgs(model={target!r}, speculative_config=spec,
                            max_model_len=256).create_engine_config()
    except Exception as err:
        results[name] = {{"error": f"{{type(err).__name__}}: {{err}}"}}
    else:
        results[name] = {{"flag": config.speculative_config.use_local_argmax_reduction}}
print(json.dumps(results))
"""


CASES = [
    # name, speculative-config extras, environment, expected flag
    ("greedy-default", {}, {}, True),
    ("probabilistic", {"draft_sample_method": "probabilistic"}, {}, False),
    ("user-false", {FLAG: False}, {}, False),
    ("user-true", {FLAG: True}, {}, True),
    ("env-off", {}, {SHORTCUT_ENV: "0"}, False),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    target, draft = write_config_only_models(str(tmp_path_factory.mktemp("shortcut")))
    code = BUILD_CONFIGS.format(
        cases=[(name, extra, env) for name, extra, env, _ in CASES]
        + [("adaptive-verification", {"enable_adaptive_verification": True}, {})],
        env_name=SHORTCUT_ENV, target=target, draft=draft,
    )
    return run_python(code), target, draft


@pytest.mark.parametrize("name, expected", [(c[0], c[3]) for c in CASES])
def test_create_engine_config_keeps_user_and_vllm(built, name, expected):
    results = built[0]
    assert "error" not in results[name], results[name]
    assert results[name]["flag"] is expected, (name, results[name])


def test_one_info_line_per_config_says_why(built):
    log = built[0]["_log"]
    lines = [line for line in log.splitlines() if "greedy draft-token shortcut" in line]
    # Adaptive verification: 0.28-0.29 raise inside SpeculativeConfig.__post_init__,
    # before the plugin's hook runs, so that config logs no line there.
    assert len(lines) in (len(CASES), len(CASES) + 1), "\n".join(lines)
    assert "turned on by the plugin" in lines[0]
    assert "draft_sample_method='probabilistic'" in lines[1]
    assert "set in the speculative config" in lines[2] and "is off" in lines[2]
    assert f"{SHORTCUT_ENV}=0" in lines[4]
    assert len(lines) == len(CASES) or "enable_adaptive_verification=True" in lines[5]
    print("\n" + "\n".join(line[line.index("vllm-kimi-eagle:"):] for line in lines))


def test_adaptive_verification_is_refused_by_vllm_not_by_our_flag(built):
    """On a CPU vLLM's V1 runner refuses adaptive verification for EAGLE3; the error
    must be that refusal, never the local-argmax conflict the plugin would cause."""
    error = built[0]["adaptive-verification"].get("error", "")
    assert error, "vLLM 0.28-0.33 refuse adaptive verification outside DSpark on CPU"
    assert "use_local_argmax_reduction" not in error, error


def test_upstream_draft_class_is_left_alone(built):
    _, target, draft = built
    code = BUILD_CONFIGS.format(cases=[("greedy-default", {}, {})], env_name=SHORTCUT_ENV,
                                target=target, draft=draft)
    result = run_python(code, env={"VLLM_KIMI_EAGLE_DRAFT": "upstream"})
    assert result["greedy-default"] == {"flag": False}
    assert "greedy draft-token shortcut" not in result["_log"]
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("_")}))
