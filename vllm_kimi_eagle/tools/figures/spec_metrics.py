"""What vLLM's metrics say about a run: acceptance, tokens, time per output token.

One parser for ``/metrics`` (``prometheus_client``'s, installed with vLLM), used by the
demo, the eval and the tests. Figures are always the difference of two scrapes around
the run being measured (``Scrape`` supports ``later - earlier``).

Counters (Prometheus names carry ``_total``; summed over the ``engine`` label):
``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
``vllm:spec_decode_num_accepted_tokens``, ``vllm:spec_decode_num_accepted_tokens_per_pos``
(label ``position``), ``vllm:generation_tokens``, ``vllm:request_success``.
Mean acceptance length = 1 + accepted / drafts; per-position rate = accepted[i] / drafts.

Time per output token: vLLM's ``vllm:request_decode_time_seconds`` histogram observes,
per finished request, the time from its first output token to its last; the first token
comes from the prefill, so decode time / (tokens - 1) is the time per output token.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

PREFIX = "vllm:spec_decode_"
GENERATION_TOKENS = "vllm:generation_tokens_total"
FINISHED_REQUESTS = "vllm:request_success_total"
DECODE_TIME = "vllm:request_decode_time_seconds"
# Gauge: the requests the scheduler runs now (polled during a window: the batch size).
RUNNING = "vllm:num_requests_running"


class Scrape:
    """Every sample of one ``/metrics`` text: name -> {sorted label items: value}."""

    def __init__(self, samples: dict[str, dict[tuple, float]] | None = None):
        self.samples = samples or {}

    @classmethod
    def parse(cls, text: str) -> "Scrape":
        from prometheus_client.parser import text_string_to_metric_families

        samples: dict[str, dict[tuple, float]] = defaultdict(dict)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
        return cls(dict(samples))

    def __sub__(self, earlier: "Scrape") -> "Scrape":
        return Scrape({
            name: {labels: value - earlier.samples.get(name, {}).get(labels, 0.0)
                   for labels, value in by_labels.items()}
            for name, by_labels in self.samples.items()
        })

    def has(self, name: str) -> bool:
        return name in self.samples

    def total(self, name: str, **labels: str) -> float:
        """Sum of a sample over the label sets that match ``labels`` (engines summed)."""
        want = set(labels.items())
        return sum(value for items, value in self.samples.get(name, {}).items()
                   if want <= set(items))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Sums of a sample per value of one label (other labels summed)."""
        result: dict[str, float] = defaultdict(float)
        for items, value in self.samples.get(name, {}).items():
            result[dict(items)[label]] += value
        return dict(result)


@dataclass
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)

    def _combine(self, other: "SpecCounters", sign: float) -> "SpecCounters":
        positions = set(self.accepted_per_pos) | set(other.accepted_per_pos)
        return SpecCounters(
            self.drafts + sign * other.drafts,
            self.draft_tokens + sign * other.draft_tokens,
            self.accepted + sign * other.accepted,
            {
                p: self.accepted_per_pos.get(p, 0.0) + sign * other.accepted_per_pos.get(p, 0.0)
                for p in sorted(positions)
            },
        )

    def __sub__(self, earlier: "SpecCounters") -> "SpecCounters":
        return self._combine(earlier, -1.0)

    def __add__(self, other: "SpecCounters") -> "SpecCounters":
        """Counters of two windows pooled (e.g. the repeats of one benchmark cell)."""
        return self._combine(other, 1.0)

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


def spec_counters(scrape: Scrape) -> SpecCounters:
    """The speculative-decoding counters of a scrape (or of a difference of two)."""
    per_pos = scrape.by_label(PREFIX + "num_accepted_tokens_per_pos_total", "position")
    return SpecCounters(
        drafts=scrape.total(PREFIX + "num_drafts_total"),
        draft_tokens=scrape.total(PREFIX + "num_draft_tokens_total"),
        accepted=scrape.total(PREFIX + "num_accepted_tokens_total"),
        accepted_per_pos={int(p): v for p, v in per_pos.items()},
    )


def has_spec_counters(scrape: Scrape) -> bool:
    """Whether a server exports speculative-decoding counters at all."""
    return scrape.has(PREFIX + "num_drafts_total")


def time_per_output_token_ms(window: Scrape) -> float | None:
    """Mean decode time per output token after each request's first, in ms (token-weighted
    over the requests that finished in ``window``, a difference of two scrapes)."""
    decode_seconds = window.total(DECODE_TIME + "_sum")
    requests = window.total(DECODE_TIME + "_count")
    decoded = window.total(GENERATION_TOKENS) - requests
    return round(1000 * decode_seconds / decoded, 3) if decoded > 0 else None


def draft_tokens_per_step(window: Scrape, requests: int) -> float | None:
    """Draft tokens verified per request and decode step in ``window`` (a difference of two
    scrapes in which ``requests`` requests ran from start to finish): each decode step of a
    request emits 1 + its accepted tokens, its prefill step 1 token, so the decode steps are
    generated - accepted - requests. What k a schedule served, from vLLM's own counters."""
    counters = spec_counters(window)
    steps = window.total(GENERATION_TOKENS) - counters.accepted - requests
    return round(counters.draft_tokens / steps, 3) if steps > 0 else None


def running_requests(metrics_text: str) -> float | None:
    """The server's running requests (``RUNNING`` gauge, summed over engines) in one
    ``/metrics`` text; None when the gauge is absent. A line scan, cheap enough to poll."""
    values = [float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
              if line.startswith(RUNNING + "{") or line.startswith(RUNNING + " ")]
    return sum(values) if values else None


def mean_batch(samples: list[float | None]) -> float | None:
    """Mean running requests over the polls of a window in which the engine was busy
    (polls between requests, with nothing running, are left out): the batch size a k
    schedule is keyed on, as the server reported it."""
    busy = [v for v in samples if v]
    return round(sum(busy) / len(busy), 3) if busy else None


def from_llm_metrics(metrics) -> SpecCounters:
    """Counters from ``LLM.get_metrics()`` (Counter and Vector objects)."""
    counters = SpecCounters()
    short_names = {"num_drafts": "drafts", "num_draft_tokens": "draft_tokens",
                   "num_accepted_tokens": "accepted"}
    for metric in metrics:
        short = metric.name[len(PREFIX):].removesuffix("_total")
        if not metric.name.startswith(PREFIX):
            continue
        if short == "num_accepted_tokens_per_pos":  # Vector: one value per position
            for pos, value in enumerate(metric.values):
                counters.accepted_per_pos[pos] = counters.accepted_per_pos.get(pos, 0.0) + value
        elif short in short_names:
            name = short_names[short]
            setattr(counters, name, getattr(counters, name) + float(metric.value))
    return counters
