"""The soak's traffic: a seeded, bounded mix of requests, planned before any is sent.

Every request draws its features independently from ``MIX`` (chat or completions, greedy
or sampled, streamed, cancelled mid-stream, stop strings, logprobs, n, a shared prefix, a
prompt at the context limit, a bad request). The first windows are greedy only: the same
draws with every request greedy, so that their acceptance differs from the mixed windows'
in one variable, sampling. Prompts are word lists from the tiny corpus (any target reads
them as text); a prompt meant to fill the context is fitted to the server's tokenizer
before the run (``fit``).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from vllm_kimi_eagle.fixtures import corpus

# Shares of the features each request draws (seeded; see plan()).
MIX = {
    "sampled": 0.45,          # temperature > 0 (never in the greedy-only windows)
    "completions": 0.4,       # the completions endpoint, else chat
    "stream": 0.35,
    "cancel": 0.3,            # of the streamed requests: the client disconnects mid-stream
    "stop": 0.15,             # stop strings
    "logprobs": 0.15,
    "n2": 0.3,                # of the sampled requests: n = 2
    "top_p": 0.5, "top_k": 0.5, "seed": 0.5,  # of the sampled requests
    "shared_prefix": 0.5,     # the prompt starts with one of PREFIXES earlier chats
    "long": 0.06,             # the prompt fills the context up to max_tokens
    "bad": 0.03,              # a request the server must refuse (BAD)
}
MAX_TOKENS = (16, 96)          # drawn uniformly, inclusive
CANCEL_AFTER = (1, 6)          # chunks with tokens read before the client disconnects
TEMPERATURES = (0.5, 0.7, 0.8, 1.0)
STOPS = (".", "is", "comes")
PREFIXES = 4                   # distinct shared prefixes
# Requests the server must refuse: (kind, HTTP status, a word the error message must hold).
BAD = (
    ("bad-too-long", 400, "input_tokens"),
    ("bad-max-tokens-0", 400, "max_tokens"),
    ("bad-unknown-model", 404, "does not exist"),
)
UNKNOWN_MODEL = "no-such-org/no-such-model"


@dataclasses.dataclass(frozen=True)
class Request:
    """One planned request; ``prompt`` is the chat's user message or the completion prompt."""

    id: int
    window: int
    kind: str                  # greedy, sampled, or a BAD kind
    endpoint: str              # "chat" or "completions"
    prompt: str
    max_tokens: int
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    n: int = 1
    logprobs: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    cancel_after: int | None = None
    fill_to: int | None = None  # the prompt is fitted to this many tokens (fit())
    model: str | None = None    # a model name other than the served one (bad requests)
    expect_status: int | None = None
    expect_word: str | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _words(rng: random.Random, count: int) -> str:
    """About ``count`` words of earlier chats (rendered as the tiny chat template)."""
    words: list[str] = []
    while len(words) < count:
        words += corpus.render(*corpus.chat(rng, answer_words=40)).split()
    return " ".join(words[:count])


def plan(seed: int, requests: int, window_size: int, greedy_windows: int,
         max_model_len: int) -> list[Request]:
    """``requests`` requests in windows of ``window_size``, the first ``greedy_windows``
    greedy only; deterministic in ``seed``."""
    rng = random.Random(seed)
    prefixes = [_words(random.Random(seed * 7919 + i), rng.randint(60, 200))
                for i in range(PREFIXES)]
    planned = []
    for i in range(requests):
        window = i // window_size
        planned.append(_draw(rng, i, window, window >= greedy_windows, prefixes, max_model_len))
    return planned


def _draw(rng: random.Random, i: int, window: int, mixed: bool, prefixes: list[str],
          max_model_len: int) -> Request:
    # Every draw happens for every request, so the greedy-only windows draw from the same
    # distribution as the mixed ones, with sampling off.
    features = {name: rng.random() < share for name, share in MIX.items()}
    instruction = corpus.chat(rng, answer_words=8)[0]
    max_tokens = rng.randint(*MAX_TOKENS)
    temperature, cancel_after = rng.choice(TEMPERATURES), rng.randint(*CANCEL_AFTER)
    stop, prefix = (rng.choice(STOPS),), rng.choice(prefixes)
    bad_kind, bad_status, bad_word = rng.choice(BAD)
    sampled = features["sampled"] and mixed
    endpoint = "completions" if features["completions"] else "chat"
    # A chat sends the instruction as its message; a completion sends the rendered turn.
    prompt = instruction if endpoint == "chat" else corpus.render(instruction)
    if features["shared_prefix"]:
        prompt = f"{prefix} {prompt}"
    request = Request(id=i, window=window, kind="sampled" if sampled else "greedy",
                      endpoint=endpoint, prompt=prompt, max_tokens=max_tokens,
                      stream=features["stream"],
                      cancel_after=cancel_after if features["stream"] and features["cancel"]
                      else None,
                      stop=stop if features["stop"] else (),
                      logprobs=2 if features["logprobs"] else None)
    if sampled:
        request = dataclasses.replace(
            request, temperature=temperature, n=2 if features["n2"] else 1,
            top_p=0.9 if features["top_p"] else None, top_k=20 if features["top_k"] else None,
            seed=1000 + i if features["seed"] else None)
    if features["long"]:
        request = dataclasses.replace(request, endpoint="completions",
                                      prompt=_words(rng, max_model_len),
                                      fill_to=max_model_len - max_tokens)
    if features["bad"]:
        request = _bad(request, bad_kind, bad_status, bad_word, rng, max_model_len)
    return request


def _bad(request: Request, kind: str, status: int, word: str, rng: random.Random,
         max_model_len: int) -> Request:
    changes: dict = {"kind": kind, "expect_status": status, "expect_word": word,
                     "stream": False, "cancel_after": None, "fill_to": None}
    if kind == "bad-too-long":
        changes.update(endpoint="completions", prompt=_words(rng, max_model_len + 64),
                       fill_to=max_model_len + 8)
    elif kind == "bad-max-tokens-0":
        changes["max_tokens"] = 0
    else:
        changes["model"] = UNKNOWN_MODEL
    return dataclasses.replace(request, **changes)


def fit(requests: list[Request], count_tokens: Callable[[str], int]) -> list[Request]:
    """Each request with ``fill_to`` gets a prompt of exactly that many tokens (or the
    fewest words above it that the tokenizer allows), counted by ``count_tokens`` (the
    server's /tokenize)."""
    fitted, cache = [], {}
    for request in requests:
        if request.fill_to is None:
            fitted.append(request)
            continue
        key = (request.prompt, request.fill_to)
        if key not in cache:
            cache[key] = _fit_one(request.prompt, request.fill_to, count_tokens)
        fitted.append(dataclasses.replace(request, prompt=cache[key]))
    return fitted


def _fit_one(text: str, tokens: int, count_tokens: Callable[[str], int]) -> str:
    """The longest prefix of ``text``'s words with at most ``tokens`` tokens (binary search)."""
    words = text.split()
    if count_tokens(text) < tokens:
        raise ValueError(f"a {len(words)}-word prompt has fewer than {tokens} tokens; "
                         "the soak cannot fill the context with it")
    low, high = 1, len(words)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(" ".join(words[:middle])) <= tokens:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low])
