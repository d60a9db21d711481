"""The Kimi-width engines as data, what is asserted of their results, and the report. Pure.

Per engine: it starts, every greedy token is the one the models were built to give
(``fixtures/kimi_width.expected_tokens``: the same as no draft, and right), drafts are
proposed by the class asked for, and acceptance has not collapsed. Per draft, the
plugin's class against vLLM's: the same tokens, the same counters (drafts, accepted per
position), the worker's peak memory within ``MEMORY_RATIO`` and the draft's weight
loading within ``LOAD_RATIO`` of vLLM's class.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_kimi_eagle.fixtures import kimi_width as kw
from vllm_kimi_eagle.tools.engines.engine_case import Check

PLUGIN, IN_TREE = "plugin", "in-tree"
MEMORY_RATIO = 1.02
LOAD_RATIO = 1.1
# Below these a ratio is the clock's or the allocator's grain, not the class's (the
# suite-width models load in milliseconds).
LEAST_COMPARED_GIB = 0.25
LEAST_COMPARED_S = 1.0
# Every draft token is accepted by construction; a wrong capture, d2t or shard collapses
# acceptance to about 1. The last step of each request drafts past its end.
LEAST_ACCEPTANCE = 3.0
# The module each class lives in (the probe names the class that loaded the draft).
CLASS_MODULES = {PLUGIN: "vllm_kimi_eagle.", IN_TREE: "vllm.model_executor.models."}


@dataclass(frozen=True)
class Case:
    name: str
    tensor_parallel: int
    draft: str | None = None
    draft_class: str | None = None

    @property
    def no_draft(self) -> str:
        return f"tp{self.tensor_parallel}/none"

    def twin(self) -> str | None:
        """vLLM's class's case for a plugin case."""
        if self.draft_class != PLUGIN:
            return None
        return f"tp{self.tensor_parallel}/{self.draft}/{IN_TREE}"

    def env(self) -> dict[str, str]:
        return {"VLLM_KIMI_EAGLE_DRAFT": "upstream" if self.draft_class == IN_TREE else "plugin"}

    @property
    def folder(self) -> str | None:
        """The folder served as the draft."""
        return self.draft

    def speculative_config(self, models: str, k: int) -> dict | None:
        if self.folder is None:
            return None
        return {"method": "eagle3", "model": f"{models}/{self.folder}",
                "num_speculative_tokens": k}


def matrix(drafts: tuple[str, ...], tensor_parallel: tuple[int, ...]) -> list[Case]:
    """Per tensor-parallel size: no draft, then each draft with both classes, vLLM's class
    first at odd sizes and the plugin's first at even ones (the page cache then favours
    neither class over the run)."""
    cases = []
    for tp in tensor_parallel:
        cases.append(Case(f"tp{tp}/none", tp))
        order = (IN_TREE, PLUGIN) if tp % 2 else (PLUGIN, IN_TREE)
        for draft in drafts:
            cases += [Case(f"tp{tp}/{draft}/{c}", tp, draft, c) for c in order]
    return cases


def start_checks(case: Case, result: dict, gpu: bool = False) -> list[Check]:
    """That the engine started (the first check; failed, with the cause, where it did
    not), and on a GPU that it was compiled and captured CUDA graphs (its log says so)."""
    if "error" in result:
        cause = f" (cause: {result['cause'][:300]})" if result.get("cause") else ""
        return [Check(case.name, "starts", False,
                      result["error"].splitlines()[-1][:300] + cause)]
    checks = [Check(case.name, "starts", True, f"in {result['start_s']} s")]
    if gpu:
        facts = result.get("log_facts", {})
        checks.append(Check(case.name, "compiled, CUDA graphs",
                            bool(facts.get("compiled") and facts.get("cuda_graphs")),
                            str(facts.get("cuda_graphs"))))
    return checks


def draft_checks(case: Case, result: dict) -> list[Check]:
    """That a draft engine proposed drafts, with the class asked for."""
    loaded_by = result.get("draft_class") or ""
    asked = CLASS_MODULES[case.draft_class]
    return [Check(case.name, "drafts proposed", result.get("drafts", 0) > 0,
                  f"{result.get('drafts')} drafts"),
            Check(case.name, "draft class", loaded_by.startswith(asked),
                  loaded_by or "no loading line from the probe")]


def case_checks(case: Case, result: dict, prompts: list[list[int]], width,
                gpu: bool = False) -> list[Check]:
    """One engine's assertions; on a GPU also that it was compiled and captured CUDA
    graphs (its log says so)."""
    def check(name: str, ok: bool, detail: str) -> Check:
        return Check(case.name, name, bool(ok), detail)

    checks = start_checks(case, result, gpu)
    if not checks[0].ok:
        return checks
    expected = [kw.expected_tokens(p, len(t), width)
                for p, t in zip(prompts, result["token_ids"])]
    right = sum(a == b for a, b in zip(result["token_ids"], expected))
    checks.append(check("greedy tokens as built", right == len(prompts),
                        f"{right}/{len(prompts)} prompts"))
    if case.draft is None:
        return checks
    checks += draft_checks(case, result)
    length = result.get("acceptance_length") or 0
    checks.append(check("acceptance as built", length >= LEAST_ACCEPTANCE,
                        f"{length} (k+1 by construction; a wrong mapping gives about 1)"))
    return checks


def pair_checks(case: Case, ours: dict, theirs: dict | None, none: dict | None,
                gpu: bool = False) -> list[Check]:
    """The plugin's class against vLLM's on one draft (and the no-draft baseline): the
    memory loading the draft added (the process's anonymous memory; on a GPU, torch's
    there) and, on the CPU, the worker's peak."""
    def check(name: str, ok: bool, detail: str) -> Check:
        return Check(case.name, name, bool(ok), detail)

    if not theirs or "error" in theirs or "error" in ours:
        return [check("against vLLM's class", False, "one of the two did not run")]
    checks = [check("tokens as vLLM's class", ours["token_ids"] == theirs["token_ids"], "")]
    counters = ("drafts", "draft_tokens", "accepted_per_position")
    same = all(ours.get(k) == theirs.get(k) for k in counters)
    checks.append(check("counters as vLLM's class", same,
                        " ".join(f"{k} {ours.get(k)} / {theirs.get(k)}" for k in counters)))
    key = "draft_load_cuda_gib" if gpu else "draft_load_anon_gib"
    if min(ours.get(key) or 0, theirs.get(key) or 0) >= LEAST_COMPARED_GIB:
        ratio = ours[key] / theirs[key]
        checks.append(check(f"memory the draft's loading added <= {MEMORY_RATIO}x",
                            ratio <= MEMORY_RATIO,
                            f"{ours[key]} / {theirs[key]} GiB = {ratio:.3f}"))
    mem, base = ours.get("memory", {}), theirs.get("memory", {})
    if not gpu and mem.get("worker_anon_gib") and base.get("worker_anon_gib"):
        ratio = mem["worker_anon_gib"] / base["worker_anon_gib"]
        baseline = (none or {}).get("memory", {}).get("worker_anon_gib")
        checks.append(check(f"worker peak memory <= {MEMORY_RATIO}x", ratio <= MEMORY_RATIO,
                            f"{mem['worker_anon_gib']} / {base['worker_anon_gib']} GiB = "
                            f"{ratio:.3f} (no draft {baseline} GiB)"))
    return checks


def loading_check(cases: list[Case], results: dict) -> list[Check]:
    """The draft's weight loading, the plugin's class against vLLM's, summed over every
    pair of the run: one cold-disk load of a few seconds varies by a third either way, the
    sum by much less."""
    ours = theirs = 0.0
    ratios = []
    for case in cases:
        twin = results.get(case.twin() or "", {})
        mine = results[case.name]
        if case.twin() and min(mine.get("draft_load_s") or 0,
                               twin.get("draft_load_s") or 0) >= LEAST_COMPARED_S:
            ours, theirs = ours + mine["draft_load_s"], theirs + twin["draft_load_s"]
            ratios.append(f"{case.name} {mine['draft_load_s'] / twin['draft_load_s']:.2f}")
    if not ratios:
        return []
    ratio = ours / theirs
    return [Check("all pairs", f"draft loading over the run <= {LOAD_RATIO}x",
                  ratio <= LOAD_RATIO, f"{ours:.1f} / {theirs:.1f} s = {ratio:.2f} ("
                  + ", ".join(ratios) + ")")]


def all_checks(cases: list[Case], results: dict, prompts, width, gpu: bool = False
               ) -> list[Check]:
    checks = []
    for case in cases:
        checks += case_checks(case, results[case.name], prompts, width, gpu)
        if case.twin():
            checks += pair_checks(case, results[case.name], results.get(case.twin()),
                                  results.get(case.no_draft), gpu)
    return checks + loading_check(cases, results)


def table(cases: list[Case], results: dict) -> str:
    """One markdown row per engine."""
    head = ("| engine | start s | target load s | draft load s | draft load GiB | "
            "worker peak anon GiB | worker peak RSS GiB | acceptance | drafts | "
            "accepted per position | tokens/s |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for case in cases:
        r = results.get(case.name, {})
        if "error" in r:
            rows.append(f"| {case.name} | failed: {r['error'].splitlines()[-1][:120]} |")
            continue
        mem = r.get("memory", {})
        tokens = sum(len(t) for t in r.get("token_ids", []))
        speed = round(tokens / r["generate_s"], 1) if r.get("generate_s") else "-"
        rows.append(
            f"| {case.name} | {r.get('start_s')} | {r.get('target_load_s', '-')} | "
            f"{r.get('draft_load_s', '-')} | "
            f"{r.get('draft_load_cuda_gib', r.get('draft_load_anon_gib', '-'))} | "
            f"{mem.get('worker_anon_gib', '-')} | "
            f"{mem.get('worker_rss_gib', '-')} | {r.get('acceptance_length', '-')} | "
            f"{r.get('drafts', '-')} | {r.get('accepted_per_position', '-')} | {speed} |")
    return "\n".join(rows)
