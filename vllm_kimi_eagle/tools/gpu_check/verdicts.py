"""What ``gpu-check`` asserts and reports, from each engine's result and log. Pure."""

from __future__ import annotations

from vllm_kimi_eagle.tools.engines.engine_case import Check
from vllm_kimi_eagle.tools.gpu_check.matrix import PLUGIN, Case

def same_as_no_draft(result: dict, no_draft: dict | None) -> tuple[int, int] | None:
    """(prompts whose tokens equal the run without a draft, prompts), or None."""
    if not no_draft or "token_ids" not in no_draft or "token_ids" not in result:
        return None
    pairs = list(zip(result["token_ids"], no_draft["token_ids"]))
    return sum(a == b for a, b in pairs), len(pairs)


def case_checks(case: Case, result: dict, facts: dict, results: dict[str, dict],
                default_runner: str | None = None) -> list[Check]:
    """The assertions of one case. ``results``: every case's result, by name;
    ``default_runner``: the runner vLLM should pick when none is forced (None: unchecked)."""
    def check(name: str, ok: bool, detail: str) -> Check:
        return Check(case.name, name, bool(ok), detail)

    if "error" in result:
        detail = result["error"].splitlines()[-1][:300]
        if result.get("cause"):
            detail += f" (cause: {result['cause'][:300]})"
        return [check("starts", False, detail)]
    checks = [check("starts", True, f"in {result.get('start_s')} s")]
    compiled = facts.get("compiled") is not None and facts.get("cuda_graphs") is not None
    checks.append(check("compiled, CUDA graphs", compiled,
                        facts.get("cuda_graphs") if compiled else
                        "no torch.compile line or no 'Graph capturing finished' in the log"))
    expected = case.runner if case.runner != "default" else default_runner
    if expected is not None:
        checks.append(check("runner", facts.get("runner") == expected,
                            f"ran {facts.get('runner')}, expected {expected}"))
    if case.draft is None:
        return checks
    checks.append(check("drafts proposed", result.get("drafts", 0) > 0,
                        f"{result.get('drafts', 0)} drafts, acceptance "
                        f"{result.get('acceptance_length')}"))
    ours = case.draft_class == PLUGIN
    checks.append(check("draft class", (facts.get("plugin_class") is not None) == ours,
                        "the plugin's class" if facts.get("plugin_class") else
                        "vLLM's in-tree class (no plugin class line in the log)"))
    if case.shortcut is not None:
        line = facts.get("shortcut") or ""
        checks.append(check("shortcut decision", case.shortcut in line,
                            line or "no shortcut line in the log"))
    twin = results.get(case.in_tree_twin) if case.in_tree_twin else None
    if twin is not None:
        same = ("error" not in twin and twin.get("token_ids") == result.get("token_ids")
                and twin.get("accepted_tokens") == result.get("accepted_tokens")
                and twin.get("drafts") == result.get("drafts"))
        checks.append(check(
            "same as vLLM's in-tree class", same,
            f"acceptance {result.get('acceptance_length')} vs "
            f"{twin.get('acceptance_length', twin.get('error', '')[:80])}; tokens "
            f"{'identical' if twin.get('token_ids') == result.get('token_ids') else 'differ'}"))
    return checks


def report_rows(cases: list[Case], results: dict[str, dict], facts: dict[str, dict],
                checks: list[Check]) -> list[dict]:
    """One row per case for the table and the JSON file."""
    rows = []
    for case in cases:
        result = results.get(case.name, {})
        mine = [c for c in checks if c.case == case.name]
        same = same_as_no_draft(result, results.get(case.no_draft) if case.no_draft else None)
        rows.append({
            "case": case.name, "what": case.describe(),
            "runner_used": facts.get(case.name, {}).get("runner"),
            "acceptance_length": result.get("acceptance_length"),
            "acceptance_by_position": result.get("acceptance_by_position"),
            "drafts": result.get("drafts"),
            "same_tokens_as_no_draft": f"{same[0]}/{same[1]}" if same else None,
            "start_s": result.get("start_s"),
            "ok": all(c.ok for c in mine),
            "failed": [f"{c.check}: {c.detail}" for c in mine if not c.ok],
            "error": result.get("error"),
        })
    return rows


def format_table(rows: list[dict]) -> str:
    header = ["case", "runner", "accept len", "per position", "drafts", "= no draft",
              "start s", "verdict"]
    table = [header]
    for r in rows:
        table.append([
            r["case"], r["runner_used"] or "-",
            "-" if r["acceptance_length"] is None else f"{r['acceptance_length']:.3f}",
            " ".join(f"{p:.2f}" for p in r["acceptance_by_position"] or []) or "-",
            "-" if r["drafts"] is None else str(r["drafts"]),
            r["same_tokens_as_no_draft"] or "-",
            "-" if r["start_s"] is None else f"{r['start_s']:.0f}",
            "PASS" if r["ok"] else "FAIL",
        ])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in table]
    for r in rows:
        lines += [f"  {r['case']}: FAIL {f}" for f in r["failed"]]
    return "\n".join(lines)
