"""The benchmark's chart: acceptance by position per k, speedup vs k per concurrency."""

from __future__ import annotations

from vllm_kimi_eagle.tools.bench_e2e.stats import speedup_rows
from vllm_kimi_eagle.tools.figures.charts import pyplot


def write_png(path: str, cells: list[dict]) -> None:
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()

    rows = speedup_rows(cells)
    lead = next(iter(rows.values()))[0]["lead"] if rows else None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for k in sorted({c["k"] for c in cells if c["config"] == lead}):
        pooled = [c for c in cells if c["config"] == lead and c["k"] == k]
        drafts = sum(c["drafts"] for c in pooled)
        if not drafts:
            continue
        rates = [sum(c["acceptance_by_position"][i] * c["drafts"] for c in pooled) / drafts
                 for i in range(k)]
        left.plot(range(1, k + 1), rates, marker="o", label=f"k={k}")
    left.set_ylim(0, 1.05)
    left.set_xlabel("draft position")
    left.set_ylabel("acceptance rate")
    left.set_title(f"acceptance by position ({lead}, all concurrencies)")
    left.legend(fontsize="small")
    for concurrency, rs in rows.items():
        points = [(row["k"], row["speedup"].get(row["lead"])) for row in rs]
        points = [(k, s) for k, s in points if s is not None]
        if points:
            right.plot(*zip(*points), marker="o", label=f"concurrency {concurrency}")
    right.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    right.set_xlabel("num_speculative_tokens (k)")
    right.set_ylabel("speedup vs no speculation (tokens/s)")
    right.set_title(f"speedup ({lead})")
    right.legend(fontsize="small")
    for axis in (left, right):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
