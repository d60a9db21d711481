"""The lm-eval side of ``vllm-kimi-eagle eval``: which tasks can measure speculation, the
offline tiny task, lm-eval's API model for a running server, and one lm-eval run."""

from __future__ import annotations

import functools
import os

DEFAULT_TASK = "gpqa_diamond_cot_zeroshot"
TINY_TASK = "kimi_eagle_gpqa_tiny"
GENERATING = "generate_until"
# The project's lm-eval tasks: eval/tasks in a checkout, the one source; a wheel carries a
# copy built from it (setup.py).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASK_FOLDERS = (os.path.join(os.path.dirname(_PACKAGE), "eval", "tasks"),
                os.path.join(_PACKAGE, "eval_tasks"))


class EvalError(ValueError):
    """An evaluation that cannot measure what it is asked to."""


def refusal(task: str, output_types: dict[str, str]) -> str | None:
    """Why ``task`` (its leaf tasks' lm-eval output types) cannot measure speculation.

    None is a Python-defined task that builds its request types in code: the LM guard
    (``refuse_scoring``) catches those when lm-eval asks for a log-likelihood."""
    silent = {name: kind for name, kind in sorted(output_types.items())
              if kind not in (GENERATING, None)}
    if not silent:
        return None
    listed = ", ".join(f"{name} ({kind})" for name, kind in list(silent.items())[:8])
    more = f" and {len(silent) - 8} more" if len(silent) > 8 else ""
    return (
        f"task {task!r} includes tasks that do not generate: {listed}{more}. lm-eval "
        "scores those by log-likelihoods (of given answers, or of a text) and generates "
        "no token, so the draft never proposes a token and neither accuracy nor "
        "acceptance says anything about speculation. Use a task whose output_type is "
        f"{GENERATING}, e.g. gpqa_diamond_cot_zeroshot (default), gpqa_*_cot_n_shot, "
        "gpqa_*_generative_n_shot or gsm8k."
    )


def task_folder(folders: tuple[str, ...] = TASK_FOLDERS) -> str:
    """The folder of the project's lm-eval tasks (for lm-eval's include_path)."""
    for folder in folders:
        if os.path.isfile(os.path.join(folder, TINY_TASK, f"{TINY_TASK}.yaml")):
            return folder
    raise EvalError(f"the project's lm-eval tasks are not installed: no {TINY_TASK}/"
                    f"{TINY_TASK}.yaml in {' or '.join(folders)}. Reinstall vllm-kimi-eagle "
                    "(pip install --force-reinstall vllm-kimi-eagle), or run from a checkout, "
                    "where they are in eval/tasks.")


# The oldest lm-eval the tools run with: lm_eval._cli (vllm-kimi-eagle lm-eval) is from
# 0.4.10, lm_eval.tasks._index (the task index read here) from 0.4.12.
LM_EVAL_FLOOR = "0.4.12"


def lm_eval_problem() -> str | None:
    """Why the installed lm-eval cannot serve the tools (missing or too old), or None."""
    import importlib.metadata

    from packaging.version import Version

    try:
        found = importlib.metadata.version("lm-eval")
    except importlib.metadata.PackageNotFoundError:
        return (f"lm-eval is not installed; the evaluation tools need lm-eval "
                f"{LM_EVAL_FLOOR} or later: pip install 'lm-eval[api]>={LM_EVAL_FLOOR}'")
    if Version(found) < Version(LM_EVAL_FLOOR):
        return (f"lm-eval {found} is installed; the evaluation tools need {LM_EVAL_FLOOR} or "
                f"later (its task index and command line): pip install -U "
                f"'lm-eval[api]>={LM_EVAL_FLOOR}'")
    return None


def require_lm_eval() -> None:
    problem = lm_eval_problem()
    if problem:
        raise EvalError(problem)


def task_manager(include_path: list[str] | tuple[str, ...] = ()):
    """lm-eval's task index with the project's tasks and the user's folders (built once
    per process and folders: about 10 s)."""
    require_lm_eval()
    return _task_index(tuple(include_path))


@functools.cache
def _task_index(include_path: tuple[str, ...]):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=[task_folder(), *include_path])


def tiny_data() -> str:
    """The questions of the tiny GPQA-format task (GPQA's columns, one JSON per line)."""
    return os.path.join(task_folder(), TINY_TASK, "gpqa_tiny.jsonl")


def task_output_types(task_manager, task: str) -> dict[str, str]:
    """lm-eval's output_type of every leaf task under ``task`` (a task, group or tag),
    read from the task index: no dataset is loaded. None: a Python task that does not
    declare it (its requests are built in code)."""
    from lm_eval.tasks._index import Kind
    from lm_eval.tasks._yaml_loader import load_yaml

    index = task_manager.task_index
    result: dict[str, str] = {}

    def visit(name: str, inline: dict | None = None) -> None:
        entry = index.get(name)
        if entry is None and inline is None:
            raise EvalError(f"lm-eval has no task, group or tag named {name!r} (lm-eval "
                            "--tasks list shows them; a local task needs its YAML folder)")
        config = {**((entry.cfg if entry else None) or {}), **(inline or {})}
        kind = entry.kind if entry else Kind.TASK
        if kind is Kind.TAG:
            for member in sorted(entry.tags):
                visit(member)
        elif kind is Kind.GROUP:
            for member in config.get("task", []):
                if isinstance(member, dict):
                    visit(member.get("task", name), member)
                else:
                    visit(member)
        elif kind is Kind.PY_TASK:
            task_class = load_yaml(entry.yaml_path, resolve_func=True)["class"]
            result[name] = config.get("output_type") or getattr(task_class, "OUTPUT_TYPE", None)
        else:
            result[name] = config.get("output_type", GENERATING)

    visit(task)
    return result


def make_lm(base_url: str, model: str, args):
    """lm-eval's API model for a running server."""
    from lm_eval.api.registry import get_model

    endpoint = "chat/completions" if args.model_type == "local-chat-completions" else "completions"
    model_args = {
        "model": model,
        "base_url": f"{base_url}/v1/{endpoint}",
        "num_concurrent": args.concurrency,
        "max_retries": 3,
        "tokenized_requests": False,
    }
    if args.model_type == "local-completions" and args.tokenizer:
        model_args["tokenizer"] = args.tokenizer
    return get_model(args.model_type).create_from_arg_obj(model_args)


def refuse_scoring(lm, task: str) -> None:
    """Make the LM refuse log-likelihood requests (a task that does not generate)."""
    def refuse(requests, *args, **kwargs):
        raise EvalError(refusal(task, {f"{task} (its requests)": requests[0].request_type}))

    lm.loglikelihood = lm.loglikelihood_rolling = refuse


def run_lm_eval(lm, args, task_manager):
    """One lm-eval run; returns (metrics of the task, samples)."""
    import lm_eval

    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=[args.task],
        limit=args.limit,
        log_samples=True,
        apply_chat_template=args.model_type == "local-chat-completions",
        gen_kwargs={"max_gen_toks": args.max_tokens, "temperature": 0.0, "do_sample": False},
        task_manager=task_manager,
        # No request cache: a cached answer never reaches the server, so the run it came
        # from would be measured instead of this one.
        use_cache=None,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
    )
    return results["results"][args.task], results["samples"][args.task]


def answers(samples: list[dict]) -> list[str]:
    """The generated answer per document (lm-eval logs one sample per filter: keep one)."""
    by_doc = {}
    for sample in samples:
        response = (sample.get("resps") or [[""]])[0]
        by_doc.setdefault(sample["doc_id"], response[0] if isinstance(response, list) else response)
    return [by_doc[doc] for doc in sorted(by_doc)]
