"""Planted faults: each a one-line change to the plugin that would hurt a user; the suite
must go red on every one of them (`make faults`).

    python tests/planted_faults.py [--faults NAME,NAME] [--tree CHECKOUT] [--out FOLDER]
                                   [--pytest-args "..."] [--list]

For each fault, a copy of the checkout (its files, without .git and virtual environments)
gets the change, and the whole suite runs there (`python -m pytest tests` with the
Makefile's arguments, the copy first on PYTHONPATH, so every process vLLM starts loads the
copy's plugin). Which tests failed goes to FOLDER/NAME.json, and a table of every fault
and the tests that caught it to FOLDER/faults.md. The exit status is 0 only when every
fault turned the suite red. ``--tree`` plants into another checkout (an older commit, to
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_FOLDERS = {".git", "out", "mutants", "__pycache__", ".pytest_cache", ".hypothesis"}


@dataclass(frozen=True)
class Fault:
    name: str
    path: str  # relative to the checkout
    original: str  # occurs in the file exactly once
    planted: str
    harm: str  # what a user would suffer


# One line each: the change, then what it would do to a user.
FAULTS = (
    Fault("capture-ids-one-off", "vllm_kimi_eagle/draft/layer_ids.py", "return [i + TO_CAPTURE_ID[convention] for i in written]", "return [i + 1 + TO_CAPTURE_ID[convention] for i in written]", "vLLM captures other layers than the draft was trained on: a silently weaker draft"),
    Fault("nope-reading-flipped", "vllm_kimi_eagle/draft/draft_positions.py", "    written = bool(draft_config.mla_use_nope)\n", "    written = not draft_config.mla_use_nope\n", "K3 NoPE drafts served with RoPE and K2 drafts without it"),
    Fault("shortcut-tie-rule", "vllm_kimi_eagle/serving/top_tokens.py", "    return torch.where(values == best, target_ids, NO_ID).min(dim=-1).values", "    return torch.where(values == best, target_ids, -NO_ID).max(dim=-1).values", "the greedy shortcut picks another draft token than vLLM on ties across ranks"),
    Fault("shortcut-padding-mask", "vllm_kimi_eagle/serving/top_tokens.py", "    logits = logits[:, :num_valid]\n", "    logits = logits\n", "the greedy shortcut can draft a padding column of the LM head"),
    Fault("cpu-sampler-mend-removed", "vllm_kimi_eagle/cpu/cpu_sampler.py", "    return {\"expand\": _install_expand(), \"top_k\": _install_top_k()}", "    return {\"expand\": \"absent\", \"top_k\": \"absent\"}", "greedy answers beside sampled requests go wrong on vLLM's CPU build"),
    Fault("d2t-ignored", "vllm_kimi_eagle/serving/top_tokens.py", "        target_ids = draft_ids if d2t is None else draft_ids + d2t[draft_ids]", "        target_ids = draft_ids", "a pruned-vocabulary draft proposes draft ids as target ids"),
    Fault("rope-override-dropped", "vllm_kimi_eagle/draft/rope_override.py", "        apply_rope_theta(config, served)", "        pass", "VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA is said to apply and does not"),
    Fault("mla-detection-off", "vllm_kimi_eagle/serving/mla_detection.py", "            return original(self) or is_kimi_mla_draft(self.hf_text_config)", "            return original(self)", "kimi_k2 drafts judged non-MLA by vLLM"),
    Fault("fc-norm-skipped", "vllm_kimi_eagle/serving/draft_model.py", "        if self.model.fc_norm is not None:\n", "        if False:\n", "an EAGLE3.1 draft's captured states reach fc unnormalised: a silently weaker draft"),
    Fault("norm-output-ignored", "vllm_kimi_eagle/serving/draft_model.py", "return out, (out if self.spec.norm_output else prenorm)", "return out, prenorm", "an EAGLE3.1 draft's later steps read the pre-norm state it was not trained on"),
    Fault("attention-input-swapped", "vllm_kimi_eagle/serving/draft_model.py", "torch.cat([self.input_layernorm(embeds), normed_hidden], dim=-1)", "torch.cat([normed_hidden, self.input_layernorm(embeds)], dim=-1)", "the draft's attention reads the hidden state where it was trained on the embedding"),
    Fault("first-capture-id-off", "vllm_kimi_eagle/draft/layer_ids.py", "return [i + TO_CAPTURE_ID[convention] for i in written]", "return [i + TO_CAPTURE_ID[convention] + (n == 0) for n, i in enumerate(written)]", "vLLM captures one layer off for the draft's first id only: a silently weaker draft"),
    Fault("q-a-layernorm-unloaded", "vllm_kimi_eagle/serving/draft_model.py", "            present.add(canonical)\n", "            present.add(canonical)  # planted\n            if canonical.endswith(\"q_a_layernorm.weight\"):\n                continue\n", "the draft's q_a_layernorm weight is left at its initial 1: a silently weaker draft"),
    Fault("final-norm-unloaded", "vllm_kimi_eagle/serving/draft_model.py", "            present.add(canonical)\n", "            present.add(canonical)  # planted\n            if canonical == \"norm.weight\":\n                continue\n", "the draft's final norm weight is left at its initial 1: a silently weaker draft"),
    Fault("release-gate-skipped", "vllm_kimi_eagle/compat/vllm_compat.py", "    if release in CHECKED_MINORS:\n", "    if True:\n", "the plugin acts in full on vLLM releases it was never checked on, its contract unread"),
)


# The suite on the copy as it is (--control): green, or no red says anything.
CONTROL = Fault("control", "", "", "", "none: no fault planted")


def apply(fault: Fault, tree: str) -> None:
    """Plant ``fault`` in the checkout at ``tree``; its original text must occur once."""
    path = os.path.join(tree, fault.path)
    with open(path) as f:
        text = f.read()
    found = text.count(fault.original)
    if found != 1:
        raise SystemExit(f"planted_faults: {fault.name}: {path} holds the text to change "
                         f"{found} times, not once: {fault.original!r}. Update FAULTS in "
                         f"{os.path.relpath(__file__, REPO)} to the code as it is now.")
    with open(path, "w") as f:
        f.write(text.replace(fault.original, fault.planted))


def copy_checkout(tree: str, dest: str) -> str:
    """The checkout's files at ``dest``: no .git, no virtual environment, no outputs."""
    def ignored(folder, names):
        return [n for n in names if n in SKIPPED_FOLDERS or n.startswith(".venv")
                or n.endswith(".egg-info")]
    shutil.copytree(tree, dest, ignore=ignored, symlinks=True)
    return dest


def failed_tests(junit_path: str) -> list[str]:
    """The ids (path::name) of the tests that failed or errored in a JUnit XML report."""
    try:
        root = ElementTree.parse(junit_path).getroot()
    except (OSError, ElementTree.ParseError):
        return []
    failed = []
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            path = case.get("classname", "").replace(".", "/")
            failed.append(f"{path}.py::{case.get('name')}")
    return sorted(set(failed))


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


def summary_table(results: list[dict]) -> str:
    lines = ["| fault | what a user would suffer | suite | tests that caught it |",
             "|---|---|---|---|"]
    for r in results:
        caught = ", ".join(f"`{t}`" for t in r["failed"]) or "none"
        state = ("red" if r["exit"] != 0 else "green" if r["name"] == CONTROL.name
                 else "GREEN (missed)")
        lines.append(f"| `{r['name']}` | {r['harm']} | {state}, {r['minutes']:.0f} min | "
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
    parser.add_argument("--control", action="store_true",
                        help="first run the suite on the copy with no fault planted (it must "
                             "be green, or no red below says anything)")
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
    runs = ([CONTROL] if args.control else []) + list(chosen)
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
            result = {"name": fault.name, "harm": fault.harm, "exit": code,
                      "minutes": (time.time() - started) / 60, "failed": failed_tests(junit),
                      "tree": os.path.abspath(args.tree)}
        with open(os.path.join(args.out, f"{fault.name}.json"), "w") as f:
            json.dump(result, f, indent=1)
        said = ("red" if code else "green" if fault is CONTROL else "GREEN: missed")
        print(f"  {said} after {result['minutes']:.1f} min, {len(result['failed'])} tests "
              "failed", flush=True)
        results.append(result)
    table = summary_table(results)
    with open(os.path.join(args.out, "faults.md"), "w") as f:
        f.write(table)
    print(table)
    missed = [r["name"] for r in results if r["exit"] == 0 and r["name"] != CONTROL.name]
    if missed:
        print(f"planted_faults: the suite stayed green on {', '.join(missed)}", file=sys.stderr)
    control_red = [r for r in results if r["name"] == CONTROL.name and r["exit"] != 0]
    if control_red:
        print(f"planted_faults: the suite was red with no fault planted: "
              f"{', '.join(control_red[0]['failed'])}", file=sys.stderr)
    return 1 if missed or control_red else 0


if __name__ == "__main__":
    sys.exit(main())
