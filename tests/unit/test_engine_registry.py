"""The suite's engines by name (tests/engines.py): a name or a job the registry does not
hold is refused before anything starts, no two names start the same configuration, and
every test module asks for its engines where collection sees them."""

from __future__ import annotations

import ast
import glob
import json
import os

import pytest

from tests import engines
from tests.helpers import MAX_TOKENS, NO_PLUGIN, PROMPTS, REPO, engine, engine_key


def test_an_unknown_name_fails_naming_the_registry():
    with pytest.raises(LookupError, match=r"no engine 'draft@nowhere' .*tests/engines.py"):
        engines.named("draft@nowhere")


def test_no_two_names_start_the_same_configuration(tmp_path):
    keys = {}
    for eng in engines.REGISTRY:
        if eng.draft == engines.GIVEN:
            continue  # each its test's own draft
        if eng.draft:  # vLLM alone reads whether it is MLA
            (tmp_path / eng.draft).mkdir(exist_ok=True)
            (tmp_path / eng.draft / "config.json").write_text('{"kv_lora_rank": 512}')
        keys.setdefault(engine_key(str(tmp_path), eng), []).append(eng.name)
    assert all(len(names) == 1 for names in keys.values()), [
        names for names in keys.values() if len(names) > 1]


@pytest.mark.parametrize("asked, error", [
    (dict(eng=engines.Engine("draft", "draft")), "no engine of the suite's registry"),
    (dict(eng="draft"), "no engine of the suite's registry"),  # a name is asked through named()
    (dict(eng=engines.named("draft"), job="both paths"), "has no job 'both paths'"),
    (dict(eng=engines.named("draft"), job={"max_tokens": 4}), "runs only its named jobs"),
    (dict(eng=engines.named("draft"), draft="/elsewhere"), "the registry names it"),
    (dict(eng=engines.named("calibrated")), "the test gives it"),
    (dict(eng=engines.named("draft"), env={"X": "1"}), "takes no environment"),
])
def test_what_the_registry_does_not_hold_is_refused_before_a_start(asked, error):
    with pytest.raises((LookupError, TypeError), match=error):
        engine("/no/tiny/models/here", **asked)


def test_every_job_runs_the_standard_prompts_unless_it_replaces_them():
    jobs = engines.jobs_of(engines.named("draft"))
    assert list(jobs) == [engines.STANDARD, "both_paths", "mixed"]
    assert jobs[engines.STANDARD] == {"prompts": PROMPTS, "max_tokens": MAX_TOKENS}
    assert jobs["mixed"]["prompts"] == PROMPTS and jobs["mixed"]["mixed"] == engines.SAMPLED
    images = engines.jobs_of(engines.named(f"{engines.K25}:draft"))
    assert list(images) == [engines.STANDARD] and images[engines.STANDARD]["image_prompts"]


def test_vllm_alone_in_float32_asks_for_cpu_mla(tmp_path):
    """As a user on a CPU with AMX must: CPU_MLA for the target and an MLA draft."""
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text('{"kv_lora_rank": 512}')
    target, draft, env, start = engine_key(str(tmp_path), engines.named("draft@no-plugin"))
    assert (target, draft) == (str(tmp_path / "target"), str(tmp_path / "draft"))
    assert json.loads(env) == NO_PLUGIN
    assert json.loads(start) == {"dtype": "float32", "attention_backend": "CPU_MLA",
                                 "draft_attention_backend": "CPU_MLA"}
    _, _, _, bf16 = engine_key(str(tmp_path), engines.named("draft@bf16"))
    assert json.loads(bf16) == {"dtype": "bfloat16"}


def _asked_inside_functions(path: str) -> list[str]:
    """The lines of ``path`` that call engines.named() inside a function."""
    found = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for call in ast.walk(node):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "named"
                        and getattr(call.func.value, "id", None) == "engines"):
                    found.append(f"{os.path.relpath(path, REPO)}:{call.lineno}")
    return found


def test_every_module_asks_for_its_engines_at_collection():
    modules = [path for folder in ("e2e", "integration")
               for path in glob.glob(os.path.join(REPO, "tests", folder, "test_*.py"))]
    inside = [line for path in modules for line in _asked_inside_functions(path)]
    assert not inside, ("ask for engines at the module's top level, so that a name the "
                        f"registry does not hold fails its collection: {inside}")
