"""Synthetic structured text for the tiny Kimi-shaped models: vocabulary, chats, prompts.

Each chat is a user instruction and a long, rule-driven answer (counting, cycles of
colours, weekdays, a table of capitals), so a small model trained on it becomes
confident: greedy choices with clear margins, which is what tests of lossless decoding
and of acceptance need. Seeded and deterministic.
"""

from __future__ import annotations

import random

SPECIAL = ["<pad>", "<unk>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>"]
NUMBERS = [str(n) for n in range(200)]
COLORS = ["red", "orange", "yellow", "green", "blue", "indigo", "violet"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
CAPITALS = [
    ("france", "paris"), ("spain", "madrid"), ("italy", "rome"), ("germany", "berlin"),
    ("japan", "tokyo"), ("china", "beijing"), ("egypt", "cairo"), ("peru", "lima"),
    ("kenya", "nairobi"), ("canada", "ottawa"), ("norway", "oslo"), ("greece", "athens"),
    ("chile", "santiago"), ("india", "delhi"), ("cuba", "havana"), ("ireland", "dublin"),
]
WORDS = [
    "count", "up", "from", "is", "item", "after", "comes", "the", "capital", "of",
    "list", "colors", "days", "capitals", "starting", "at", "with", "and", "then",
    ".", ",", ":", "please", "tell", "me", "next", "a", "an", "answer", "question",
    "which", "what", "b", "c", "d", "correct",
]
VOCAB_SIZE = 512


def vocabulary() -> list[str]:
    """Token strings in id order, padded with reserved tokens to VOCAB_SIZE."""
    words = SPECIAL + NUMBERS + COLORS + DAYS + WORDS
    words += [w for pair in CAPITALS for w in pair]
    seen: list[str] = []
    for w in words:
        if w not in seen:
            seen.append(w)
    return seen + [f"<reserved_{i}>" for i in range(VOCAB_SIZE - len(seen))]


def _counting(rng: random.Random, n: int) -> tuple[str, list[str]]:
    start = rng.randrange(0, 100)
    return f"count up from {start}", [str(k % 200) for k in range(start, start + n)]


def _items(rng: random.Random, n: int) -> tuple[str, list[str]]:
    k, c = rng.randrange(0, 150), rng.randrange(len(COLORS))
    instruction = f"list colors from item {k} with {COLORS[c]}"
    out: list[str] = []
    while len(out) < n:
        out += ["item", str(k % 200), "is", COLORS[c % len(COLORS)], "."]
        k, c = k + 1, c + 1
    return instruction, out


def _days(rng: random.Random, n: int) -> tuple[str, list[str]]:
    d = rng.randrange(len(DAYS))
    instruction = f"list days after {DAYS[d]}"
    out: list[str] = []
    while len(out) < n:
        out += ["after", DAYS[d % 7], "comes", DAYS[(d + 1) % 7], "."]
        d += 1
    return instruction, out


def _capitals(rng: random.Random, n: int) -> tuple[str, list[str]]:
    i = rng.randrange(len(CAPITALS))
    instruction = f"list capitals from {CAPITALS[i][0]}"
    out: list[str] = []
    while len(out) < n:
        country, city = CAPITALS[i % len(CAPITALS)]
        out += ["the", "capital", "of", country, "is", city, "."]
        i += 1
    return instruction, out


TRACKS = (_counting, _items, _days, _capitals)


def chat(rng: random.Random, answer_words: int = 120) -> tuple[str, str]:
    """(user instruction, assistant answer) of one synthetic chat."""
    track = TRACKS[rng.randrange(len(TRACKS))]
    instruction, words = track(rng, answer_words)
    return instruction, " ".join(words)


def render(instruction: str, answer: str | None = None) -> str:
    """A chat in the tiny tokenizer's template (the same text its chat_template makes)."""
    prompt = f"<|user|> {instruction} <|assistant|>"
    return prompt if answer is None else f"{prompt} {answer} <|eos|>"


CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} "
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def training_text(seed: int, chats: int) -> list[str]:
    """Rendered chats for training, deterministic in ``seed``."""
    rng = random.Random(seed)
    return [render(*chat(rng)) for _ in range(chats)]


def demo_prompts(count: int = 8, seed: int = 1234) -> list[str]:
    """User instructions for demos and tests (held out from training by seed)."""
    rng = random.Random(seed)
    return [chat(rng, answer_words=8)[0] for _ in range(count)]
