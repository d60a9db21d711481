"""Progress of the tools: on stderr, flushed, so that stdout stays the result.

``bar`` draws in place on a terminal (tqdm). Where stderr is a file, a pipe or CI's log,
an in-place bar would leave one line per update (a tiny-model build made over a
thousand); there it writes a line each ``EVERY`` percent instead, and one at the end.
"""

from __future__ import annotations

import sys
import time

EVERY = 5  # percent between two lines where the output is not a terminal


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class LineProgress:
    """The part of tqdm's interface the tools use, as a line every EVERY percent."""

    def __init__(self, total: int, desc: str, unit: str, stream, every: int = EVERY):
        self.total, self.desc, self.unit, self.stream, self.every = total, desc, unit, stream, every
        self.n, self.shown, self.postfix = 0, 0, ""
        self.started = time.monotonic()

    def line(self) -> str:
        percent = 100 * self.n // self.total if self.total else 100
        elapsed = time.monotonic() - self.started
        left = (f", about {_duration(elapsed * (self.total - self.n) / self.n)} left"
                if 0 < self.n < self.total else "")
        extra = f" {self.postfix}" if self.postfix else ""
        return (f"{self.desc}: {percent}% ({self.n}/{self.total} {self.unit}s, "
                f"{_duration(elapsed)}{left}){extra}")

    def update(self, n: int = 1) -> None:
        self.n += n
        step = (100 * self.n // self.total) // self.every if self.total else 0
        if step > self.shown:
            self.shown = step
            print(self.line(), file=self.stream, flush=True)

    def set_postfix(self, **values) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def unpause(self) -> None:  # tqdm's: restarts its rate after a wait; lines need nothing
        pass

    def write(self, message: str, file=None) -> None:
        print(message, file=file or self.stream, flush=True)

    def close(self) -> None:
        if self.total and self.shown < 100 // self.every:
            self.shown = 100 // self.every
            print(self.line(), file=self.stream, flush=True)


class _Silent(LineProgress):
    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass


def bar(total: int, desc: str, unit: str, enabled: bool = True, stream=None):
    """A progress bar on ``stream`` (stderr): in place on a terminal, else a line each
    EVERY percent; nothing when not ``enabled``."""
    stream = stream or sys.stderr
    if not enabled:
        return _Silent(total, desc, unit, stream)
    if stream.isatty():
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True)
    return LineProgress(total, desc, unit, stream)
