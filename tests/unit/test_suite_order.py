"""The suite's order (tests/conftest.py: the longest files first, each named file still
there; --test-order) and how tests/helpers.engine tells an engine from a job."""

import os

from tests.conftest import LONGEST_FIRST, SAME_WORKER, longest_first
from tests.helpers import REPO


def test_every_named_file_exists():
    missing = [p for p in (*LONGEST_FIRST, *SAME_WORKER)
               if not os.path.exists(os.path.join(REPO, p))]
    assert not missing, f"renamed or removed: {missing}; update LONGEST_FIRST / SAME_WORKER"


def test_named_files_first_in_their_order_the_rest_as_collected():
    paths = ["tests/unit/a.py", LONGEST_FIRST[1], "tests/e2e/b.py", LONGEST_FIRST[0],
             LONGEST_FIRST[1]]
    assert [paths[i] for i in longest_first(paths)] == [
        LONGEST_FIRST[0], LONGEST_FIRST[1], LONGEST_FIRST[1], "tests/unit/a.py",
        "tests/e2e/b.py"]


def test_the_test_order_reverses_or_shuffles_the_same_way_every_time():
    from tests.helpers import reordered

    things = list(range(10))
    assert reordered(things, "") == things and reordered(things, "reverse:0") == things[::-1]
    shuffled = reordered(things, "shuffle:3")
    assert sorted(shuffled) == things and shuffled != things
    assert reordered(things, "shuffle:3") == shuffled != reordered(things, "shuffle:4")


def test_an_engine_is_what_is_started_and_a_job_what_it_is_asked(tmp_path):
    """engine()'s keywords split into the engine's key and the job; a module's declared
    EngineJob names the same engine as the call that asks it."""
    from tests.helpers import (
        MAX_TOKENS,
        NO_PLUGIN,
        PROMPTS,
        EngineJob,
        _engine_and_job,
    )

    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text('{"kv_lora_rank": 512}')
    key, job = _engine_and_job(str(draft), None, "t", {"max_tokens": 16, "dtype": "bfloat16"})
    assert key == ("t", str(draft), "{}", '{"dtype": "bfloat16"}')
    assert job == {"prompts": PROMPTS, "max_tokens": 16}
    declared = EngineJob("draft", {"max_tokens": 16}, start={"dtype": "bfloat16"},
                         target=str(tmp_path / "t"))
    assert declared.key_and_job(str(tmp_path)) == (
        (str(tmp_path / "t"), str(draft), "{}", key[3]), job)
    # vLLM alone in float32 gets CPU_MLA for target and MLA draft (as a user on AMX must).
    alone, standard = _engine_and_job(str(draft), NO_PLUGIN, "t", {})
    assert alone[2] == '{"VLLM_PLUGINS": ""}' and standard["max_tokens"] == MAX_TOKENS
    assert '"attention_backend": "CPU_MLA"' in alone[3]
    assert '"draft_attention_backend": "CPU_MLA"' in alone[3]
