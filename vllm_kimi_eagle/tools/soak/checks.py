"""What the soak asserts, as pure functions of the plan, the outcomes and the windows.

Each check returns ``{"name", "passed", "detail"}``; the soak fails when one fails.
"""

from __future__ import annotations

from vllm_kimi_eagle.tools.soak.client import CANCELLED, HTTP_ERROR, OK, Outcome
from vllm_kimi_eagle.tools.soak.traffic import Request

DRAFT, NONE = "draft", "none"
FINISHED = ("stop", "length")
SHOWN = 5  # problems listed per check


def check(name: str, problems: list[str], summary: str) -> dict:
    detail = summary if not problems else (
        f"{summary}; {len(problems)} problem(s): " + "; ".join(problems[:SHOWN]))
    return {"name": name, "passed": not problems, "detail": detail}


def answer_problem(request: Request, outcome: Outcome) -> str | None:
    """Why ``outcome`` is not an acceptable answer to ``request`` (None when it is): a
    bad request must get its HTTP error, naming what was wrong; any other request must
    complete (or be cancelled by the client as planned) with n choices within max_tokens."""
    where = f"request {request.id} ({request.kind}, {request.endpoint})"
    if request.expect_status is not None:
        if outcome.status != HTTP_ERROR or outcome.http_status != request.expect_status:
            return (f"{where}: expected HTTP {request.expect_status}, got {outcome.status} "
                    f"{outcome.http_status or ''} {outcome.message[:120]}")
        if request.expect_word not in outcome.message:
            return f"{where}: the error does not name {request.expect_word!r}: {outcome.message[:160]}"
        return None
    if outcome.status not in (OK, CANCELLED):
        return f"{where}: {outcome.status} {outcome.http_status or ''} {outcome.message[:160]}"
    if outcome.status == CANCELLED and request.cancel_after is None:
        return f"{where}: cancelled without being asked to"
    if outcome.status == OK and len(outcome.choices) != request.n:
        return f"{where}: {len(outcome.choices)} choices for n={request.n}"
    for choice in outcome.choices:
        if len(choice["token_ids"]) > request.max_tokens:
            return f"{where}: {len(choice['token_ids'])} tokens for max_tokens {request.max_tokens}"
        if outcome.status == OK and choice["finish_reason"] not in FINISHED:
            return f"{where}: finish_reason {choice['finish_reason']!r}"
        if outcome.status == OK and request.logprobs is not None and not choice["logprobs"]:
            return f"{where}: logprobs asked for, none returned"
    return None


def answers(plan: list[Request], outcomes: dict[str, dict[int, Outcome]]) -> dict:
    problems = [f"{server}: {p}" for server, by_id in outcomes.items() for r in plan
                if (p := answer_problem(r, by_id[r.id]))]
    refused = sum(r.expect_status is not None for r in plan)
    return check("every request answered", problems,
                 f"{len(plan)} requests on each of {len(outcomes)} servers, {refused} of them "
                 "bad requests that must be refused with the field named")


def greedy_difference(draft: Outcome, none: Outcome) -> str | None:
    """Where the draft server's greedy answer leaves the no-draft server's (None: same).
    A cancelled stream is compared over the tokens both sides received."""
    ours, theirs = draft.choices[0]["token_ids"], none.choices[0]["token_ids"]
    if CANCELLED in (draft.status, none.status):
        length = min(len(ours), len(theirs))
        ours, theirs = ours[:length], theirs[:length]
    elif draft.choices[0]["finish_reason"] != none.choices[0]["finish_reason"]:
        return (f"finish_reason {draft.choices[0]['finish_reason']} vs "
                f"{none.choices[0]['finish_reason']} after {len(ours)} / {len(theirs)} tokens")
    if ours == theirs:
        return None
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return (f"token {at}: {ours[at] if at < len(ours) else 'end'} vs "
            f"{theirs[at] if at < len(theirs) else 'end'} ({len(ours)} / {len(theirs)} tokens)")


def comparable(request: Request, draft: Outcome, none: Outcome) -> bool:
    return (request.greedy and request.expect_status is None and request.n == 1
            and draft.status in (OK, CANCELLED) and none.status in (OK, CANCELLED)
            and bool(draft.choices) and bool(none.choices))


def greedy_identical(plan: list[Request], outcomes: dict[str, dict[int, Outcome]]) -> dict:
    compared, problems = 0, []
    beside_sampled = 0
    sampled_windows = {r.window for r in plan if not r.greedy}
    for r in plan:
        draft, none = outcomes[DRAFT][r.id], outcomes[NONE][r.id]
        if not comparable(r, draft, none):
            continue
        compared += 1
        beside_sampled += r.window in sampled_windows
        if (difference := greedy_difference(draft, none)) is not None:
            problems.append(f"request {r.id} (window {r.window}, {r.endpoint}"
                            f"{', stream' if r.stream else ''}): {difference}")
    return check("greedy answers = no draft's, token for token", problems,
                 f"{compared} greedy answers compared, {beside_sampled} of them in windows "
                 "with sampled requests")


def drafts_throughout(windows: list) -> dict:
    ours = [w for w in windows if w.server == DRAFT]
    problems = [f"window {w.index}: {w.counters['drafts']} drafts, "
                f"{w.counters['accepted_tokens']} accepted" for w in ours
                if not w.counters["drafts"] or not w.counters["accepted_tokens"]]
    preempted = [w for w in ours if w.preemptions]
    after = [w for w in ours if preempted and w.index >= preempted[0].index]
    lengths = [w.counters["acceptance_length"] for w in after if w.counters["acceptance_length"]]
    return check("drafts accepted in every window", problems,
                 f"{len(ours)} windows; {len(preempted)} with preemptions; from the first "
                 f"preemption on, acceptance {min(lengths, default=0):.2f}-"
                 f"{max(lengths, default=0):.2f}")


def pooled_acceptance(windows: list, indices: set[int]) -> float | None:
    drafts = sum(w.counters["drafts"] for w in windows if w.server == DRAFT and w.index in indices)
    accepted = sum(w.counters["accepted_tokens"] for w in windows
                   if w.server == DRAFT and w.index in indices)
    return 1 + accepted / drafts if drafts else None


def acceptance_mixed_vs_greedy(plan: list[Request], windows: list, tolerance: float) -> dict:
    sampled = {r.window for r in plan if not r.greedy}
    greedy_only = {r.window for r in plan} - sampled
    greedy, mixed = pooled_acceptance(windows, greedy_only), pooled_acceptance(windows, sampled)
    if greedy is None or mixed is None:
        return check("acceptance with sampled traffic near greedy-only", [
            "needs windows of both kinds with drafts"], f"greedy-only {greedy}, mixed {mixed}")
    problems = [] if abs(mixed - greedy) <= tolerance else [
        f"differ by {abs(mixed - greedy):.3f} > {tolerance}"]
    return check("acceptance with sampled traffic near greedy-only", problems,
                 f"greedy-only windows {greedy:.3f}, mixed windows {mixed:.3f} "
                 f"(within {tolerance})")


def counts(plan: list[Request], outcomes: dict[str, dict[int, Outcome]], windows: list,
           min_preemptions: int, min_cancellations: int) -> dict:
    preemptions = sum(w.preemptions for w in windows if w.server == DRAFT)
    cancelled = sum(o.status == CANCELLED for o in outcomes[DRAFT].values())
    problems = []
    if preemptions < min_preemptions:
        problems.append(f"{preemptions:.0f} preemptions < {min_preemptions}: lower --kv-blocks "
                        "or raise --concurrency")
    if cancelled < min_cancellations:
        problems.append(f"{cancelled} cancellations < {min_cancellations}: more requests")
    return check("KV pressure and cancellations", problems,
                 f"draft server: {preemptions:.0f} preemptions, {cancelled} streams cancelled "
                 f"by the client")


def drained(windows: list) -> dict:
    problems = [f"{w.server} window {w.index}" for w in windows if not w.drained]
    return check("nothing left running after a window", problems,
                 "every cancelled stream aborted, every queue empty")


def rss_growth(samples: list[tuple[float, int]], since: float = 0.0) -> float | None:
    """Mean RSS of the last third of the samples taken from ``since`` on, over that of
    their first third, minus 1."""
    samples = [s for s in samples if s[0] >= since]
    third = len(samples) // 3
    if third == 0:
        return None
    first = sum(v for _, v in samples[:third]) / third
    last = sum(v for _, v in samples[-third:]) / third
    return last / first - 1 if first else None


def memory_flat(memory: dict[str, list[tuple[float, int]]], limit: float,
                since: float = 0.0) -> dict:
    """The server with the draft must keep its memory within ``limit`` from the first to
    the last third of the run after ``since`` (the warm-up); the server without a draft is
    the control, reported beside it: what vLLM's memory does with no draft at all."""
    problems, parts = [], []
    for server, samples in memory.items():
        growth = rss_growth(samples, since)
        if growth is None:
            problems.append(f"{server}: too few samples")
            continue
        mib = samples[-1][1] / 2**20
        role = "" if server == DRAFT else ", the control"
        parts.append(f"{server}{role} {growth:+.1%} ({mib:.0f} MiB at the end; "
                     f"{rss_growth(samples):+.1%} with the warm-up)")
        if server == DRAFT and growth > limit:
            problems.append(f"{server} grew {growth:.1%} > {limit:.0%}")
    return check("RSS flat (last third vs first third)", problems,
                 f"from the end of the warm-up at {since:.0f}s: " + ", ".join(parts))


def servers_up(alive: dict[str, bool]) -> dict:
    problems = [f"{name} is down" for name, up in alive.items() if not up]
    return check("servers up to the end", problems, "healthy after the last window")
