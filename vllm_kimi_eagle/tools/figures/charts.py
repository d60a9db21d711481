"""matplotlib for the tools' PNG charts: headless (Agg), imported only when a chart is drawn."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
