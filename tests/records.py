"""The runtime's decisions take a draft's validated record (draft_config.DraftConfig);
tests write drafts as the dicts a config.json holds. These call each decision on the
record of such a dict, parsed here, at the test's edge (a record passes as it is)."""

from __future__ import annotations

import os

from vllm_kimi_eagle.draft import draft_positions, draft_spec, layer_ids
from vllm_kimi_eagle.draft.draft_config import as_record


def spec_from_config(config, source: str = "the draft config"):
    return draft_spec.spec_from_config(as_record(config, source))


def resolve_layer_ids(config, *args, **kwargs):
    return layer_ids.resolve_layer_ids(as_record(config), *args, **kwargs)


def decide_positions(config, environ=os.environ):
    return draft_positions.decide_positions(as_record(config), environ)
