"""Acceptance figures from vLLM's speculative-decoding counters.

Counters (Prometheus names, each with ``_total``; ``_created`` samples skipped; summed
over the ``engine`` label): ``vllm:spec_decode_num_drafts``,
``vllm:spec_decode_num_draft_tokens``, ``vllm:spec_decode_num_accepted_tokens`` and
``vllm:spec_decode_num_accepted_tokens_per_pos`` (label ``position``).
Mean acceptance length = 1 + accepted / drafts; per-position rate = accepted[i] / drafts.
Always take the difference of two readings around the run you measure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFIX = "vllm:spec_decode_"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)

    def __sub__(self, earlier: "SpecCounters") -> "SpecCounters":
        positions = set(self.accepted_per_pos) | set(earlier.accepted_per_pos)
        return SpecCounters(
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted - earlier.accepted,
            {
                p: self.accepted_per_pos.get(p, 0.0) - earlier.accepted_per_pos.get(p, 0.0)
                for p in sorted(positions)
            },
        )

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted/drafts; None when no draft was proposed."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    @property
    def acceptance_by_position(self) -> list[float]:
        if not self.drafts:
            return []
        return [self.accepted_per_pos[p] / self.drafts for p in sorted(self.accepted_per_pos)]

    def summary(self) -> dict:
        length = self.acceptance_length
        return {
            "acceptance_length": round(length, 4) if length is not None else None,
            "acceptance_by_position": [round(r, 4) for r in self.acceptance_by_position],
            "drafts": int(self.drafts),
            "draft_tokens": int(self.draft_tokens),
            "accepted_tokens": int(self.accepted),
        }


def _add(counters: SpecCounters, name: str, labels: dict, value: float) -> None:
    short = name[len(PREFIX):].removesuffix("_total")
    if short == "num_drafts":
        counters.drafts += value
    elif short == "num_draft_tokens":
        counters.draft_tokens += value
    elif short == "num_accepted_tokens":
        counters.accepted += value
    elif short == "num_accepted_tokens_per_pos":
        pos = int(labels["position"])
        counters.accepted_per_pos[pos] = counters.accepted_per_pos.get(pos, 0.0) + value


def from_prometheus(text: str) -> SpecCounters:
    """Counters from a ``/metrics`` scrape (all engines summed)."""
    counters = SpecCounters()
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or not match.group(1).startswith(PREFIX):
            continue
        name = match.group(1)
        if name.endswith("_created"):
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        _add(counters, name, labels, float(match.group(3)))
    return counters


def from_llm_metrics(metrics) -> SpecCounters:
    """Counters from ``LLM.get_metrics()`` (Counter and Vector objects)."""
    counters = SpecCounters()
    for metric in metrics:
        if not metric.name.startswith(PREFIX):
            continue
        if hasattr(metric, "values"):  # Vector: one value per position
            for pos, value in enumerate(metric.values):
                _add(counters, metric.name, {"position": pos}, float(value))
        else:
            _add(counters, metric.name, {}, float(metric.value))
    return counters
