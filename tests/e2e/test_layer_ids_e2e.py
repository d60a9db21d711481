"""Layer ids end to end on the tiny trained models: a draft written output-of,
served through the plugin, drafts like its input-of copy."""

from __future__ import annotations

import pytest

from tests import engines
from tests.helpers import engine, served
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_ENV

pytestmark = pytest.mark.engine
INPUT_OF, OUTPUT_OF, VERBATIM = (engines.named(n) for n in (
    "draft", "draft-output-of", "draft-output-of@read-input-of"))


def test_output_of_copy_drafts_like_input_of_copy_through_plugin(tiny):
    """The same draft written with output-of ids [1, 2, 4] and input-of ids [2, 3, 5].

    The "verbatim" run changes one variable: the same plugin (draft class, alias, MLA
    detection) is told to read the ids as vLLM does (input-of), as if it did not shift.
    """
    input_of = served(engine(tiny, INPUT_OF))
    output_of = served(engine(tiny, OUTPUT_OF))
    verbatim = served(engine(tiny, VERBATIM))
    for run in (input_of, output_of, verbatim):
        assert run["drafts"] > 0, "no draft proposed: acceptance would compare nothing"
    assert "vLLM will capture the inputs of layers [2, 3, 5]" in output_of["_log"]
    assert "vLLM will capture the inputs of layers [1, 2, 4]" in verbatim["_log"]
    assert verbatim["draft_class"] == output_of["draft_class"]
    print(
        f"\nacceptance length: input-of copy {input_of['acceptance_length']}, "
        f"output-of copy via plugin {output_of['acceptance_length']}, "
        f"output-of copy read verbatim ({CONVENTION_ENV}=input-of) "
        f"{verbatim['acceptance_length']}"
        f"\n  by position: {input_of['acceptance_by_position']} | "
        f"{output_of['acceptance_by_position']} | {verbatim['acceptance_by_position']}"
    )
    assert output_of["acceptance_length"] == input_of["acceptance_length"]
    assert output_of["token_ids"] == input_of["token_ids"]
    # Read one layer off, the draft still runs, silently, on other inputs, and accepts
    # less: by at least the build's margin on these prompts (BUILT.json,
    # capture_one_layer_early: fixtures/margins.py). The size is printed above.
    assert verbatim["acceptance_length"] < input_of["acceptance_length"]
