"""The lifted models' engines as data, what each is held to, and its checks. Pure.

The lifted drafts (``fixtures/lifted.py``) compute the trained tiny drafts' function at a
wide width, so each engine's acceptance is known before it runs: the reference models
replay the engine's own greedy tokens as vLLM counts them (``offline.served_acceptance``),
with the engine's serving applied (a control, or RoPE on a NoPE draft under vLLM's class).
Per engine: it starts, its greedy tokens are the no-draft engine's at the same
tensor-parallel size (speculation is lossless), drafts are proposed by the class asked
for, and acceptance is the reference's within ``TOLERANCE``. Per control: its acceptance
drops below its draft's served right by more than ``LEAST_DROP``. Per draft, the plugin's
class against vLLM's: tokens, peak memory (``verdicts.pair_checks``); over the run, weight
loading (``verdicts.loading_check``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_kimi_eagle.fixtures import controls as ctl
from vllm_kimi_eagle.fixtures import lifted
from vllm_kimi_eagle.tools.engines.engine_case import Check
from vllm_kimi_eagle.tools.kimi_width import verdicts
from vllm_kimi_eagle.tools.kimi_width.verdicts import IN_TREE, PLUGIN

# |served - reference| acceptance. The replay stops k tokens before each request's end,
# where vLLM still drafts: served runs up to 0.03 below it in float32; bfloat16 engines
# also flip a near-tie now and then.
TOLERANCE = {"float32": 0.05, "bfloat16": 0.2}
# The least a control must lose against its draft served right, and more than the run's
# own noise (TOLERANCE).
LEAST_DROP = 0.05


@dataclass(frozen=True)
class Case(verdicts.Case):
    """A torus-models case with, where it serves one, a negative control."""

    control: str | None = None  # a controls.CONTROLS name

    @property
    def folder(self) -> str | None:
        if self.control and ctl.control_named(self.control).folder:
            return ctl.control_named(self.control).folder
        return self.draft

    def right(self) -> str | None:
        """The case serving this control's draft right (the plugin's class)."""
        if not self.control:
            return None
        return f"tp{self.tensor_parallel}/{self.draft}/{PLUGIN}"

    def twin(self) -> str | None:
        """vLLM's class's case for a plugin case of a draft served right."""
        return None if self.control else super().twin()


def _in_tree_control(draft: str) -> str | None:
    """The control that vLLM's class is, on this draft (a NoPE draft served with RoPE)."""
    for control in ctl.CONTROLS:
        if control.draft == draft and control.draft_class == IN_TREE and not control.folder:
            return control.name
    return None


def matrix(drafts: tuple[str, ...], tensor_parallel: tuple[int, ...],
           control_names: tuple[str, ...] = ctl.CONTROL_NAMES) -> list[Case]:
    """Per tensor-parallel size: no draft, then each draft with both classes (vLLM's class
    first at odd sizes, the plugin's at even ones); at the first size also each control
    written as a folder, served by the plugin's class."""
    cases = []
    for i, tp in enumerate(tensor_parallel):
        cases.append(Case(f"tp{tp}/none", tp))
        order = (IN_TREE, PLUGIN) if tp % 2 else (PLUGIN, IN_TREE)
        for draft in drafts:
            for c in order:
                control = _in_tree_control(draft) if c == IN_TREE else None
                cases.append(Case(f"tp{tp}/{draft}/{c}", tp, draft, c,
                                  control if control in control_names else None))
        if i == 0:
            for control in ctl.CONTROLS:
                if control.folder and control.draft in drafts and control.name in control_names:
                    cases.append(Case(f"tp{tp}/{control.folder}", tp, control.draft, PLUGIN,
                                      control.name))
    return cases


def case_checks(case: Case, result: dict, results: dict, dtype: str,
                gpu: bool = False) -> list[Check]:
    """One engine's assertions (``result["reference_acceptance"]`` filled in by the run)."""
    def check(name: str, ok: bool, detail: str) -> Check:
        return Check(case.name, name, bool(ok), detail)

    checks = verdicts.start_checks(case, result, gpu)
    if not checks[0].ok or case.draft is None:
        return checks
    none = results.get(case.no_draft, {})
    same = none.get("token_ids") == result["token_ids"]
    checks.append(check("greedy tokens as without a draft", same,
                        "" if same else "the no-draft engine did not run" if "token_ids"
                        not in none else "differ"))
    checks += verdicts.draft_checks(case, result)
    served, reference = result.get("acceptance_length") or 0, result.get("reference_acceptance")
    if reference is not None:
        checks.append(check("acceptance as the reference replays it",
                            abs(served - reference) <= TOLERANCE[dtype],
                            f"{served} served, {reference} by the reference "
                            f"(within {TOLERANCE[dtype]})"))
    if case.control:
        right = results.get(case.right(), {}).get("acceptance_length")
        drop = None if right is None else round(right - served, 3)
        least = max(LEAST_DROP, TOLERANCE[dtype])
        checks.append(check(f"control drops (> {least})", drop is not None and drop > least,
                            f"{ctl.control_named(case.control).what}: {served} against "
                            f"{right} served right (drop {drop})"))
    return checks


def all_checks(cases: list[Case], results: dict, dtype: str, gpu: bool = False
               ) -> list[Check]:
    checks = []
    for case in cases:
        checks += case_checks(case, results[case.name], results, dtype, gpu)
        if case.twin():
            checks += [c for c in verdicts.pair_checks(case, results[case.name],
                                              results.get(case.twin()),
                                              results.get(case.no_draft), gpu)
                       if not c.check.startswith("counters")]
    return checks + verdicts.loading_check(cases, results)


def table(cases: list[Case], results: dict) -> str:
    """One markdown row per engine: served against the reference's acceptance."""
    head = ("| engine | control | start s | draft load s | worker peak anon GiB | "
            "acceptance | reference | drafts | accepted per position | tokens/s |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for case in cases:
        r = results.get(case.name, {})
        if "error" in r:
            rows.append(f"| {case.name} | {case.control or ''} | failed: "
                        f"{r['error'].splitlines()[-1][:120]} |")
            continue
        tokens = sum(len(t) for t in r.get("token_ids", []))
        speed = round(tokens / r["generate_s"], 1) if r.get("generate_s") else "-"
        rows.append(
            f"| {case.name} | {case.control or ''} | {r.get('start_s')} | "
            f"{r.get('draft_load_s', '-')} | {r.get('memory', {}).get('worker_anon_gib', '-')} | "
            f"{r.get('acceptance_length', '-')} | {r.get('reference_acceptance', '-')} | "
            f"{r.get('drafts', '-')} | {r.get('accepted_per_position', '-')} | {speed} |")
    return "\n".join(rows)


def drafts_named(names: str) -> tuple[str, ...]:
    return tuple(lifted.draft_named(n).name for n in names.split(",") if n)
