"""The data of kimi_eagle_gpqa_tiny: read from beside this file, choices in a fixed order."""

from __future__ import annotations

import os
import random

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpqa_tiny.jsonl")


def load(**_model_and_metadata):
    """lm-eval's custom_dataset: the questions as one split (lm-eval passes the model's
    arguments and the task's metadata, which the data does not depend on)."""
    import datasets

    return datasets.DatasetDict({"train": datasets.Dataset.from_json(DATA)})


def choices(doc: dict) -> tuple[list[str], str]:
    """The four answers in an order fixed by the question, and the correct one's letter."""
    answers = [doc["Incorrect Answer 1"], doc["Incorrect Answer 2"],
               doc["Incorrect Answer 3"], doc["Correct Answer"]]
    answers = [" ".join((a or "").split()) or " " for a in answers]
    correct = answers[3]
    random.Random(doc["Question"]).shuffle(answers)
    return answers, f"({'ABCD'[answers.index(correct)]})"


def process_docs(dataset):
    def fields(doc):
        answers, letter = choices(doc)
        return {**{f"choice{i + 1}": a for i, a in enumerate(answers)},
                "choices": answers, "answer": letter}

    return dataset.map(fields)
