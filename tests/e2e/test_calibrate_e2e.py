"""vllm-kimi-eagle calibrate on the tiny models, real vLLM: one capture of the target serves
every draft; each draft's known trained layers must be what calibrate recommends.

The capture engine runs once (the first test), with helpers.engine's token budget and
calibrate's own prompts for the tiny models, as many as this build's margins need
(``calibration_prompts``); every other calibration reuses it (--capture). One calibration confirms
online (two engines) and writes a calibrated copy, which a third engine serves.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests import engines
from tests.helpers import MAX_TOKENS, engine, place_in_hf_cache, run_cli, served
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_KEY, IDS_KEY
from vllm_kimi_eagle.fixtures.cache import build_summary
from vllm_kimi_eagle.fixtures.margins import CALIBRATE_DECIDES
from vllm_kimi_eagle.fixtures.variants import DRAFT_VARIANTS, TRAINED
from vllm_kimi_eagle.tools.calibrate import cli
from vllm_kimi_eagle.tools.calibrate.prompts import default_prompts

pytestmark = pytest.mark.engine
ALL_LAYERS = "1,2,3,4,5,6"
# The build's margins (BUILT.json, fixtures/margins.py) the verdicts here rest on: the
# base and the EAGLE3.1 draft read one layer late ([3, 4, 6] for [2, 3, 5]), the late
# draft one layer early ([2, 3, 4] for [3, 4, 5]), the K3 drafts read with RoPE, the base
# draft served with ten times its rope base. The builder measured them on calibrate's own prompts for the
# tiny models, which these tests use, twice as many as the margins need to be decided and
# at least calibrate's first round.
DECIDED_HERE = CALIBRATE_DECIDES
FIRST_ROUND = cli.TINY_DEFAULTS["num_prompts"]
# A calibrate --write copy served on calibrate's prompts (tests/engines.py).
CALIBRATED = engines.named("calibrated")

# Drafts whose trained reading these prompts do not decide (the build measures no margin
# for them): calibrate keeps today's reading, undecided. Every other one must be decided.
NOT_DECIDED_HERE = ("draft-norm-before-residual",)


def calibration_prompt_count(margins: dict) -> int:
    needed = [margins[name]["prompts_to_decide"] for name in DECIDED_HERE]
    assert None not in needed, f"a margin this file needs cannot be decided: {margins}"
    return max(FIRST_ROUND, 2 * max(needed))


@pytest.fixture(scope="module")
def calibration_prompts(tiny) -> list[dict]:
    count = calibration_prompt_count(build_summary(tiny)["margins"])
    prompts, _ = default_prompts(os.path.join(tiny, "target"), count)
    print(f"\n{count} calibration prompts (the build's margins: "
          + ", ".join(f"{n} {build_summary(tiny)['margins'][n]['cost']}" for n in DECIDED_HERE)
          + ")")
    return prompts
# Every tiny draft and training-tool export, with the layers it was trained on (the
# inputs of these layers, vLLM's meaning).
TRAINED_ON = {
    **{name: [2, 3, 5] for name in (
        "draft", "draft-eagle3.1", "draft-midlayer", "draft-shared", "draft-pruned",
        "draft-sharded-bf16", "draft-output-of", "draft-modelopt", "draft-torchspec",
        "draft-torchspec-vllm", "draft-specforge", "draft-norm-before-residual",
        "draft-narrow")},
    "draft-late-modelopt": [3, 4, 5], "draft-late-explicit": [3, 4, 5],
}


@pytest.fixture(scope="module")
def capture(tiny, calibration_prompts, tmp_path_factory):
    """The capture folder and the prompts file every calibration here uses."""
    root = tmp_path_factory.mktemp("calibrate")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in calibration_prompts))
    return {"dir": str(root / "capture"), "prompts": str(prompts), "root": root,
            "count": len(calibration_prompts)}


def arguments(target: str, draft: str, capture, out: str) -> list[str]:
    """calibrate's arguments for one draft: the shared prompts, token budget and capture."""
    return ["--target", target, "--draft", draft, "--prompts", capture["prompts"],
            "--num-prompts", str(capture["count"]), "--max-tokens", str(MAX_TOKENS), "--capture", capture["dir"],
            "--capture-layers", ALL_LAYERS, "--out", out, "--json"]


def calibrate(tiny, capture, draft: str, *extra: str, capsys) -> tuple[int, dict]:
    """One calibration in this process (the capture engine is a child process); (exit
    status, the JSON report)."""
    code = cli.main(arguments(os.path.join(tiny, "target"), draft, capture,
                              str(capture["root"] / "out")) + list(extra))
    out, err = capsys.readouterr()
    print(err[-3000:])
    return code, json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(TRAINED_ON))
def test_calibrate_recommends_the_layers_each_draft_was_trained_on(tiny, capture, name, capsys):
    code, report = calibrate(tiny, capture, os.path.join(tiny, name), "--no-confirm",
                             capsys=capsys)
    rows = {tuple(r["capture_ids"]): r["acceptance_length"] for r in report["candidates"]}
    print(f"{name}: " + ", ".join(f"{list(c)} {a:.3f}" for c, a in rows.items()))
    assert report["recommended"]["capture_ids"] == TRAINED_ON[name]
    assert report["candidates"][0]["drafts"] > 0
    # The plugin already reads each of these right: calibrate keeps today's reading, and
    # says it measured so (an undecided verdict keeps it too, for want of evidence).
    assert report["current"]["capture_ids"] == TRAINED_ON[name] and code == 0
    if name not in NOT_DECIDED_HERE:
        assert report["recommended"]["status"] == "keep", report["recommended"]["why"]


def test_calibrate_takes_ids_from_the_hugging_face_cache(tiny, capture, capsys, tmp_path):
    """Target and draft named by hub id, found in a Hugging Face cache offline, calibrate
    as their folders do; the capture is keyed on the target's files, so it is shared."""
    code, by_folder = calibrate(tiny, capture, os.path.join(tiny, "draft-output-of"),
                                "--no-confirm", capsys=capsys)
    cache = str(tmp_path / "hf-cache")
    place_in_hf_cache(cache, "tiny-org/target", os.path.join(tiny, "target"))
    place_in_hf_cache(cache, "tiny-org/draft-output-of", os.path.join(tiny, "draft-output-of"))
    proc = run_cli("calibrate", *arguments("tiny-org/target", "tiny-org/draft-output-of",
                                           capture, str(tmp_path / "out")), "--no-confirm",
                   env={"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == code, proc.stderr[-3000:]
    assert "capture: reusing" in proc.stderr, proc.stderr[-3000:]
    by_id = json.loads(proc.stdout.strip().splitlines()[-1])
    assert by_id["draft"].startswith(cache) and by_id["target"].startswith(cache), by_id
    assert by_id["candidates"] == by_folder["candidates"]
    assert by_id["current"] == by_folder["current"]
    assert by_id["recommended"] == by_folder["recommended"]
    assert by_id["recommended"]["capture_ids"] == TRAINED_ON["draft-output-of"]


def _retyped(tiny, root, source: str, name: str, edit) -> str:
    folder = root / name
    shutil.copytree(os.path.join(tiny, source), folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_a_draft_whose_ids_cannot_tell_is_measured(tiny, capture, capsys):
    """Trained on [3, 4, 5], written output-of [2, 3, 4] with nothing else: the plugin
    reads it input-of (AMBIGUOUS); calibrate finds [3, 4, 5] and says how to state it."""
    def bare(config):
        config.pop(IDS_KEY), config.pop(CONVENTION_KEY)
        config["eagle_config"][IDS_KEY] = [2, 3, 4]

    draft = _retyped(tiny, capture["root"], "draft-late-explicit", "late-bare", bare)
    code, report = calibrate(tiny, capture, draft, "--no-confirm", capsys=capsys)
    assert report["current"]["capture_ids"] == [2, 3, 4]
    assert report["recommended"]["capture_ids"] == [3, 4, 5]
    assert report["recommended"]["setting"]["config.json"] == {CONVENTION_KEY: "output-of"}
    assert report["recommended"]["beats_current"] and code == cli.EXIT_RECOMMEND


def test_a_rope_base_stated_wrong_is_measured_and_named(tiny, capture, capsys):
    """The base draft (trained with rope base 50000) whose config.json says 500000, as
    TorchSpec's drafts said 50000 for a base of 10000: asked to measure 50000 beside it,
    calibrate recommends the trained base, decided, and says where to write it."""
    trained = json.loads(open(os.path.join(tiny, "draft", "config.json")).read())["rope_theta"]
    draft = _retyped(tiny, capture["root"], "draft", "rope-base-mislabelled",
                     lambda config: config.update(rope_theta=10 * trained))
    code, report = calibrate(tiny, capture, draft, "--no-confirm", "--rope-theta",
                             f"{trained:g}", capsys=capsys)
    rec = report["recommended"]
    print(", ".join(f"{r['reading']} {r['per_prompt_mean']}" for r in report["candidates"]))
    assert report["current"]["capture_ids"] == [2, 3, 5]
    assert any(r["rope_theta"] is None for r in report["candidates"])  # the config's base
    assert rec["capture_ids"] == [2, 3, 5] and rec["rope_theta"] == trained, rec
    assert rec["beats_current"] and code == cli.EXIT_RECOMMEND, rec["why"]
    assert rec["setting"]["config.json"]["rope_theta"] == trained


@pytest.mark.parametrize("name", ["draft", "draft-eagle3.1"])
def test_a_wrong_explicit_convention_is_caught_confirmed_and_written(tiny, capture, name,
                                                                    calibration_prompts, capsys):
    """The base and the EAGLE3.1 draft (each trained on [2, 3, 5]) with an explicit but
    wrong "output-of": the plugin captures [3, 4, 6]. calibrate measures both, serves both,
    recommends [2, 3, 5]; its --write copy serves at the acceptance it confirmed."""
    draft = _retyped(tiny, capture["root"], name, f"{name}-mislabelled",
                     lambda config: config.update({CONVENTION_KEY: "output-of"}))
    written = str(capture["root"] / f"{name}-calibrated")
    code, report = calibrate(tiny, capture, draft, "--write", written, capsys=capsys)
    rec = report["recommended"]
    assert report["current"]["capture_ids"] == [3, 4, 6]
    assert rec["capture_ids"] == [2, 3, 5] and code == cli.EXIT_RECOMMEND
    assert rec["online"]["drafts"] > 0 and report["current"]["online"]["drafts"] > 0
    assert rec["online"]["acceptance_length"] > report["current"]["online"]["acceptance_length"]
    # Served, the counters decide (every release has them); vLLM's per-request figures
    # are reported beside them, prompt by prompt:
    online = rec["online_difference"]
    assert len(rec["online"]["per_prompt"]) == online["pairs"] == report["prompts"]
    print(f"served, prompt by prompt: {online}")
    assert online["mean"] > 0 and "served by vLLM on the same prompts" in rec["why"]
    assert json.loads(open(os.path.join(written, "config.json")).read())[CONVENTION_KEY] == \
        "input-of"
    assert json.loads(open(os.path.join(draft, "config.json")).read())[CONVENTION_KEY] == \
        "output-of"  # the user's folder is untouched
    result = served(engine(tiny, CALIBRATED, {"prompts": [p["messages"][0]["content"]
                                                          for p in calibration_prompts]},
                           draft=written))
    assert result["drafts"] > 0
    print(f"--write copy served: acceptance {result['acceptance_length']} "
          f"{result['acceptance_by_position']}; calibrate confirmed {rec['online']}")
    assert result["acceptance_length"] == pytest.approx(rec["online"]["acceptance_length"],
                                                        abs=1e-4)


@pytest.mark.parametrize("name", ["draft-late-explicit", "draft-narrow", "draft-k3-nope",
                                  "draft-k3-eagle3.1"])
def test_every_other_trained_draft_with_a_wrong_convention_is_corrected(tiny, capture, name,
                                                                       capsys):
    """The drafts trained on their own that the confirmed test above leaves out (the late,
    narrow and both Kimi-K3 ones), each with an explicit but wrong "output-of": the plugin
    captures every id one layer late; calibrate recommends the layers it was trained on,
    decided, and says how to state them."""
    draft = _retyped(tiny, capture["root"], name, f"{name}-mislabelled",
                     lambda config: config.update({CONVENTION_KEY: "output-of"}))
    code, report = calibrate(tiny, capture, draft, "--no-confirm", capsys=capsys)
    rec = report["recommended"]
    print(f"{name}: " + ", ".join(f"{r['reading']} {r['per_prompt_mean']}"
                                  for r in report["candidates"]))
    trained = [list(TRAINED[v.trained].capture) for v in DRAFT_VARIANTS if v.name == name][0]
    assert report["current"]["capture_ids"] == [i + 1 for i in trained]
    assert rec["capture_ids"] == trained
    assert rec["status"] == "change" and rec["beats_current"], rec["why"]
    assert code == cli.EXIT_RECOMMEND
    assert rec["setting"]["config.json"][CONVENTION_KEY] == "input-of"


def _nope_written(folder: str) -> tuple:
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    return config.get("mla_use_nope"), config.get("mla_use_nope_measured")


@pytest.mark.parametrize("name", ["draft-k3-nope", "draft-k3-eagle3.1"])
def test_calibrate_settles_a_k3_drafts_ambiguous_nope(tiny, capture, calibration_prompts,
                                                       name, capsys, tmp_path):
    """The K3 drafts as exported without a TorchSpec marker: inspect's AMBIGUOUS (NoPE
    today, as trained). calibrate measures RoPE beside it, keeps NoPE, decided, and its
    --write copy says so (read as NoPE, no longer ambiguous); served by vLLM, the copy
    beats the same draft read with RoPE."""
    written = str(tmp_path / "calibrated")
    code, report = calibrate(tiny, capture, os.path.join(tiny, name), "--no-confirm",
                             "--write", written, capsys=capsys)
    rec = report["recommended"]
    print(f"{name}: " + ", ".join(f"{r['reading']} {r['per_prompt_mean']}"
                                  for r in report["candidates"]))
    assert any(r["nope"] is False for r in report["candidates"]), report["candidates"]
    assert rec["nope"] is True and rec["capture_ids"] == [2, 3, 5]
    assert rec["status"] == "keep" and code == 0, rec["why"]
    assert _nope_written(written) == (True, True)
    rope = _retyped(tiny, tmp_path, name, "read-with-rope",
                    lambda config: config.update(mla_use_nope=False))
    prompts = [p["messages"][0]["content"] for p in calibration_prompts]
    as_trained, as_rope = (served(engine(tiny, CALIBRATED, {"prompts": prompts}, draft=folder))
                           for folder in (written, rope))
    assert as_trained["drafts"] > 0 and as_rope["drafts"] > 0
    print(f"served: NoPE {as_trained['acceptance_length']}, RoPE {as_rope['acceptance_length']}")
    assert as_trained["acceptance_length"] > as_rope["acceptance_length"]

