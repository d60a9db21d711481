"""Planted faults: each a one-line change to the plugin that would hurt a user; the suite
must go red on every one of them (`make faults`).

    python tests/planted_faults.py [--faults NAME,NAME] [--tree CHECKOUT] [--out FOLDER]
                                   [--pytest-args "..."] [--list]

First the suite runs on a copy of the checkout as it is (the control): it must run
green, tests having run, or nothing below would say anything, and no fault is run. Then
for each fault, a copy of the checkout (its files, without .git and virtual environments)
gets the change, and the whole suite runs there (`python -m pytest tests` with the
Makefile's arguments, the copy first on PYTHONPATH, so every process vLLM starts loads the
copy's plugin). A fault is caught where at least one test failed on it (read from the
run's JUnit report): an exit status alone may be a collection error, a timeout or the
restart rule. Which tests failed goes to FOLDER/NAME.json, and a table of every fault and
the tests that caught it to FOLDER/faults.md. The exit status is 0 only when the control
was green and a test failed on every fault. ``--tree`` plants into another checkout (an older commit, to
compare what its suite caught); the original text of each fault must occur in its file
exactly once there too.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

from vllm_kimi_eagle.fixtures.wrong_servings import WRONG_SERVINGS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_FOLDERS = {".git", "out", "mutants", "__pycache__", ".pytest_cache", ".hypothesis"}


@dataclass(frozen=True)
class Fault:
    name: str
    path: str  # relative to the checkout
    original: str  # occurs in the file exactly once
    planted: str
    harm: str  # what a user would suffer
    # Further (original, planted) pairs in the same file, for a fault one line cannot plant.
    also: tuple[tuple[str, str], ...] = ()

    @property
    def edits(self) -> tuple[tuple[str, str], ...]:
        return ((self.original, self.planted), *self.also)


# Faults of the plugin that serve no draft wrong in a way the registry names (its reading
# of configs, the shortcut's rules, the mends, the switches). One line each: the change,
# then what it would do to a user.
PLUGIN_FAULTS = (
    Fault("nope_reading_flipped", "vllm_kimi_eagle/draft/draft_positions.py", "    written = bool(draft_config.mla_use_nope)\n", "    written = not draft_config.mla_use_nope\n", "K3 NoPE drafts served with RoPE and K2 drafts without it"),
    Fault("shortcut_tie_rule", "vllm_kimi_eagle/serving/top_tokens.py", "    return torch.where(values == best, target_ids, NO_ID).min(dim=-1).values", "    return torch.where(values == best, target_ids, -NO_ID).max(dim=-1).values", "the greedy shortcut picks another draft token than vLLM on ties across ranks"),
    Fault("shortcut_padding_mask", "vllm_kimi_eagle/serving/top_tokens.py", "    logits = logits[:, :num_valid]\n", "    logits = logits\n", "the greedy shortcut can draft a padding column of the LM head"),
    Fault("cpu_sampler_mend_removed", "vllm_kimi_eagle/cpu/cpu_sampler.py", "    return {\"expand\": _install_expand(), \"top_k\": _install_top_k()}", "    return {\"expand\": \"absent\", \"top_k\": \"absent\"}", "greedy answers beside sampled requests go wrong on vLLM's CPU build"),
    Fault("shortcut_d2t_ignored", "vllm_kimi_eagle/serving/top_tokens.py", "        target_ids = draft_ids if d2t is None else draft_ids + d2t[draft_ids]", "        target_ids = draft_ids", "a pruned-vocabulary draft proposes draft ids as target ids"),
    Fault("rope_override_dropped", "vllm_kimi_eagle/draft/rope_override.py", "        apply_rope_theta(config, served)", "        pass", "VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA is said to apply and does not"),
    Fault("mla_detection_off", "vllm_kimi_eagle/serving/mla_detection.py", "            return original(self) or is_kimi_mla_draft(self.hf_text_config)", "            return original(self)", "kimi_k2 drafts judged non-MLA by vLLM"),
    Fault("norm_output_ignored", "vllm_kimi_eagle/serving/draft_model.py", "return out, (out if self.spec.norm_output else prenorm)", "return out, prenorm", "an EAGLE3.1 draft's later steps read the pre-norm state it was not trained on"),
    Fault("attention_input_swapped", "vllm_kimi_eagle/serving/draft_model.py", "torch.cat([self.input_layernorm(embeds), normed_hidden], dim=-1)", "torch.cat([normed_hidden, self.input_layernorm(embeds)], dim=-1)", "the draft's attention reads the hidden state where it was trained on the embedding"),
    Fault("release_gate_skipped", "vllm_kimi_eagle/compat/vllm_compat.py", "    if release in CHECKED_MINORS:\n", "    if True:\n", "the plugin acts in full on vLLM releases it was never checked on, its contract unread"),
    Fault("nope_rotary_kept", "vllm_kimi_eagle/serving/draft_model.py", "        if spec.nope:  # Kimi-K3: the rope dims are attended unrotated\n", "        if False:\n", "a Kimi-K3 NoPE draft served with its rope dims rotated: a silently weaker draft"),
    Fault("nope_scale_yarn", "vllm_kimi_eagle/serving/draft_model.py", "    if not spec.nope:\n        return config\n", "    if True:\n        return config\n", "a Kimi-K3 NoPE draft's softmax scaled by yarn's mscale it was not trained with"),
    Fault("output_gate_not_applied", "vllm_kimi_eagle/serving/draft_model.py", "            self.self_attn.mla_attn.g_proj = ReplicatedLinear(", "            self.self_attn.g_proj_kept = ReplicatedLinear(", "a gated Kimi-K3 draft's g_proj loaded and never applied: a silently weaker draft", also=(("MOVED_PARAMS = {\"self_attn.g_proj.\": \"self_attn.mla_attn.g_proj.\"}", "MOVED_PARAMS = {\"self_attn.g_proj.\": \"self_attn.g_proj_kept.\"}"),)),
    Fault("hidden_norm_flag_ignored", "vllm_kimi_eagle/serving/draft_model.py", "        self.hidden_norm = RMSNorm(h, eps=eps) if spec.hidden_norm else nn.Identity()", "        self.hidden_norm = RMSNorm(h, eps=eps)", "a draft trained without hidden_norm (use_input_layernorm_in_first_layer false) served with one at weight 1"),
    Fault("final_norm_flag_ignored", "vllm_kimi_eagle/serving/draft_model.py", "        self.norm = RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps) if spec.final_norm else None", "        self.norm = RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)", "a draft trained without its final norm (use_last_layernorm false) served with one at weight 1"),
    Fault("norm_before_residual_ignored", "vllm_kimi_eagle/serving/draft_model.py", "        self.norm_before_residual = spec.norm_before_residual", "        self.norm_before_residual = False", "a norm_before_residual draft's residual taken before hidden_norm: a silently weaker draft"),
    Fault("quantization_scale_unloaded", "vllm_kimi_eagle/serving/draft_model.py", "            present.add(canonical)\n", "            present.add(canonical)  # planted\n            if canonical.endswith((\"weight_scale\", \"weight_scale_inv\")):\n                continue\n", "a quantized draft's scales left at their initial values: a draft that proposes nothing useful"),
    Fault("window_refusal_removed", "vllm_kimi_eagle/draft/draft_fields.py", "        return window\n", "        return None\n", "a sliding-window draft served with full attention, without a word"),
    Fault("plugin_switch_ignored", "vllm_kimi_eagle/__init__.py", "    if not settings.value(settings.PLUGIN):\n", "    if False:\n", "VLLM_KIMI_EAGLE=0 does not turn the plugin off"),
    Fault("upstream_tensors_unchecked", "vllm_kimi_eagle/draft/draft_report.py", "    checked = layout is not None", "    checked = choice.ours and layout is not None", "a pruned draft without d2t served at acceptance 1.0 by vLLM's class, without a word"),
)


def _serving_fault(serving) -> Fault:
    planted = serving.planted
    return Fault(serving.name, planted.path, planted.original, planted.planted, planted.harm,
                 planted.also)


# Every wrong serving of the registry (fixtures/wrong_servings.py) that one edit to the
# plugin plants, under its name there, then the plugin's own.
FAULTS = tuple(_serving_fault(s) for s in WRONG_SERVINGS if s.planted) + PLUGIN_FAULTS


# The suite on the copy as it is, run first: green, or no red says anything.
CONTROL = Fault("control", "", "", "", "none: no fault planted")


def apply(fault: Fault, tree: str) -> None:
    """Plant ``fault`` in the checkout at ``tree``; each original text must occur once."""
    path = os.path.join(tree, fault.path)
    with open(path) as f:
        text = f.read()
    for original, planted in fault.edits:
        found = text.count(original)
        if found != 1:
            raise SystemExit(f"planted_faults: {fault.name}: {path} holds the text to change "
                             f"{found} times, not once: {original!r}. Update the fault to the "
                             f"code as it is now: its wrong serving's planted edit in "
                             f"vllm_kimi_eagle/fixtures/wrong_servings.py, or PLUGIN_FAULTS "
                             f"in {os.path.relpath(__file__, REPO)}.")
        text = text.replace(original, planted)
    with open(path, "w") as f:
        f.write(text)


def copy_checkout(tree: str, dest: str) -> str:
    """The checkout's files at ``dest``: no .git, no virtual environment, no outputs."""
    def ignored(folder, names):
        return [n for n in names if n in SKIPPED_FOLDERS or n.startswith(".venv")
                or n.endswith(".egg-info")]
    shutil.copytree(tree, dest, ignore=ignored, symlinks=True)
    return dest


def failed_tests(junit_path: str) -> list[str]:
    """The ids (path::name) of the tests that failed or errored in a JUnit XML report."""
    return junit_cases(junit_path)[1]


def junit_cases(junit_path: str) -> tuple[int, list[str]]:
    """How many tests a JUnit XML report says ran, and the ids (path::name) of those that
    failed or errored (a module that failed to collect is no test)."""
    try:
        root = ElementTree.parse(junit_path).getroot()
    except (OSError, ElementTree.ParseError):
        return 0, []
    ran, failed = 0, []
    for case in root.iter("testcase"):
        error = case.find("error")
        if error is not None and error.get("message") == "collection failure":
            continue  # a module that did not import: no test of it ran
        ran += 1
        if case.find("failure") is not None or case.find("error") is not None:
            path = case.get("classname", "").replace(".", "/")
            failed.append(f"{path}.py::{case.get('name')}")
    return ran, sorted(set(failed))


# This tool's own tests check that each fault's text is in the checkout: a planted fault
# fails them by design, which says nothing of the suite's power.
OWN_TESTS = "tests/unit/test_planted_faults.py"


def run_suite(tree: str, python: str, pytest_args: list[str], junit: str, log: str) -> int:
    env = {**os.environ, "PYTHONPATH": tree, "VLLM_TARGET_DEVICE": "cpu"}
    env.pop("VLLM_KIMI_EAGLE_START_LOG", None)  # each run keeps its own account
    with open(log, "w") as out:
        own = [f"--ignore={OWN_TESTS}"] if os.path.exists(os.path.join(tree, OWN_TESTS)) else []
        suite = subprocess.Popen([python, "-m", "pytest", "tests", *own, *pytest_args,
                                  f"--junitxml={junit}"], cwd=tree, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return suite.wait()
        finally:  # interrupted too: nothing the suite started is left running
            try:
                os.killpg(suite.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def verdict(result: dict) -> str:
    """What a run says: a fault is caught only where a test failed on it (an exit status
    alone may be a collection error, a timeout or the restart rule); the control must
    run green, tests having run."""
    if result["name"] == CONTROL.name:
        return "green" if result["exit"] == 0 and result["ran"] else "RED (control)"
    if result["failed"]:
        return "caught"
    return "MISSED" if result["exit"] == 0 else f"MISSED (exit {result['exit']}, no test failed)"


def summary_table(results: list[dict]) -> str:
    lines = ["| fault | what a user would suffer | verdict | tests that caught it |",
             "|---|---|---|---|"]
    for r in results:
        caught = ", ".join(f"`{t}`" for t in r["failed"]) or "none"
        lines.append(f"| `{r['name']}` | {r['harm']} | {verdict(r)}, {r['minutes']:.0f} min | "
                     f"{len(r['failed'])}: {caught} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="planted_faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", help="comma-separated names (default: all)")
    parser.add_argument("--tree", default=REPO, help="the checkout to plant into")
    parser.add_argument("--out", default=os.path.join(REPO, "out", "faults"))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pytest-args", default="-n 2 --dist loadfile -q -p no:cacheprovider")
    parser.add_argument("--list", action="store_true", help="list the faults and stop")
    args = parser.parse_args(argv)
    # Stopped with SIGTERM too, the suite running now is stopped with it (run_suite).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    chosen = FAULTS
    if args.faults:
        names = args.faults.split(",")
        unknown = sorted(set(names) - {f.name for f in FAULTS})
        if unknown:
            parser.error(f"no such fault: {', '.join(unknown)} (known: "
                         f"{', '.join(f.name for f in FAULTS)})")
        chosen = tuple(f for f in FAULTS if f.name in names)
    if args.list:
        for fault in chosen:
            print(f"{fault.name}: {fault.path}: {fault.harm}")
        return 0
    os.makedirs(args.out, exist_ok=True)
    results = []
    # The control first: a red below says something only where the same suite ran green.
    runs = [CONTROL, *chosen]
    for number, fault in enumerate(runs, 1):
        with tempfile.TemporaryDirectory(prefix=f"fault-{fault.name}-") as folder:
            tree = copy_checkout(os.path.abspath(args.tree), os.path.join(folder, "tree"))
            if fault is not CONTROL:
                apply(fault, tree)
            print(f"[{number}/{len(runs)}] {fault.name}: the suite in {tree} ...",
                  flush=True)
            started = time.time()
            junit = os.path.join(args.out, f"{fault.name}.xml")
            code = run_suite(tree, args.python, shlex.split(args.pytest_args), junit,
                             os.path.join(args.out, f"{fault.name}.log"))
            ran, failed = junit_cases(junit)
            result = {"name": fault.name, "harm": fault.harm, "exit": code, "ran": ran,
                      "minutes": (time.time() - started) / 60, "failed": failed,
                      "tree": os.path.abspath(args.tree)}
        with open(os.path.join(args.out, f"{fault.name}.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(f"  {verdict(result)} after {result['minutes']:.1f} min: {ran} tests ran, "
              f"{len(failed)} failed", flush=True)
        results.append(result)
        if fault is CONTROL and verdict(result) != "green":
            break  # no red below would say anything
    table = summary_table(results)
    with open(os.path.join(args.out, "faults.md"), "w") as f:
        f.write(table)
    print(table)
    control = results[0]
    if verdict(control) != "green":
        print(f"planted_faults: the suite was not green with no fault planted ({control['ran']} "
              f"tests ran; failed: {', '.join(control['failed']) or 'none'}; exit "
              f"{control['exit']}): no fault was run. See {args.out}/control.log.",
              file=sys.stderr)
        return 1
    missed = [r["name"] for r in results[1:] if verdict(r) != "caught"]
    if missed:
        print(f"planted_faults: no test failed on {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
