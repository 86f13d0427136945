"""``shardkit new``: ask a local template's questions, check each answer when it is given.

shardkit asks every question of a local template itself, from its ``cookiecutter.json`` and with
cookiecutter's own semantics (key order, ``_``/``__`` keys not asked, a list is a choice, a default
is rendered from the answers before it), and then lets cookiecutter generate the repo with no
questions of its own, so each is asked once. An answer is checked as it is typed, and asked again
until it is good, by the template's own rules (``hooks/answer_rules.py``: the same file its
pre-generation hook checks a plain ``cookiecutter`` run with) plus what only shardkit knows:
unknown keys (a typo such as ``licence=`` would otherwise be ignored silently), choices, and that
the template's placeholder namespace is not published.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "hub-dataset")
PLACEHOLDER_NAMESPACE = "your-username"
#: Tasks whose datasets carry a class per row: `shardkit new` suggests --class-label for them.
CLASSIFICATION_TASKS = ("image-classification", "audio-classification")


def load_questions(template_dir: str, directory: str | None = None) -> dict[str, Any] | None:
    """The template's ``cookiecutter.json``, or None for a template that is not a local folder."""
    path = os.path.join(template_dir, directory or "", "cookiecutter.json")
    try:
        with open(path, encoding="utf-8") as f:
            loaded: dict[str, Any] = json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return loaded


def load_rules(template_dir: str, directory: str | None = None) -> types.ModuleType | None:
    """The template's ``hooks/answer_rules.py`` as a module, or None if it has none.

    Executed from its source rather than imported, so no bytecode is written into the template."""
    path = os.path.join(template_dir, directory or "", "hooks", "answer_rules.py")
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    module = types.ModuleType("answer_rules")
    module.__file__ = path
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def asked_keys(questions: Mapping[str, Any]) -> list[str]:
    """The keys cookiecutter asks, in its order: not the private ``_``/``__`` ones."""
    return [key for key in questions if not key.startswith("_")]


def choices_of(
    questions: Mapping[str, Any], rules: types.ModuleType | None, key: str, answers: Mapping[str, Any]
) -> list[str] | None:
    """The only answers ``key`` takes given the answers so far (a list in ``cookiecutter.json``,
    or the template's rules: e.g. the tasks of the modality answered), or None for free text."""
    raw = questions.get(key)
    if isinstance(raw, list):
        return [str(choice) for choice in raw]
    found: list[str] | None = rules.choices(key, answers, questions) if rules is not None else None
    return found


def check_answer(
    questions: Mapping[str, Any], rules: types.ModuleType | None, key: str, value: str, answers: Mapping[str, Any]
) -> list[str]:
    """Why ``value`` is not a good answer to ``key`` given the answers before it, one line each."""
    raw = questions.get(key)
    if isinstance(raw, list) and value not in [str(choice) for choice in raw]:
        return [f"{key} {value!r} is not one of: {', '.join(map(str, raw))}"]
    found: list[str] = rules.answer_problems(key, value, answers, questions) if rules is not None else []
    if key == "namespace" and value == PLACEHOLDER_NAMESPACE == questions.get("namespace"):
        found.append(
            "namespace: give the Hub user or organization that will own the dataset;"
            f" the placeholder {PLACEHOLDER_NAMESPACE!r} would be published in the card"
        )
    return found


def answer_problems(
    questions: Mapping[str, Any], answers: Mapping[str, str], *, no_input: bool, rules: types.ModuleType | None = None
) -> list[str]:
    """Everything wrong with ``answers`` (KEY=VALUE given to ``shardkit new``), one line each."""
    asked = asked_keys(questions)
    found = []
    for key in answers:
        if key not in asked:
            close = difflib.get_close_matches(key, asked, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            found.append(f"unknown answer {key!r}{hint}; the questions are: {', '.join(asked)}")
    for key, value in answers.items():
        if key in asked:
            found.extend(check_answer(questions, rules, key, value, answers))
    if no_input and questions.get("namespace") == PLACEHOLDER_NAMESPACE and "namespace" not in answers:
        found.append(
            "namespace: give the Hub user or organization that will own the dataset (namespace=NAME);"
            f" the placeholder {PLACEHOLDER_NAMESPACE!r} would be published in the card"
        )
    return found


@dataclass(frozen=True)
class Question:
    """One question as the user sees it."""

    key: str
    text: str  #: the template's ``__prompts__`` line, or the key
    default: str  #: rendered from the answers before it, as cookiecutter renders it
    choices: tuple[str, ...]  #: the only answers taken; empty for free text


class Interrupted(Exception):
    """The user stopped answering (Ctrl-C or the end of input): ``answers`` are those given so far."""

    def __init__(self, answers: dict[str, str]) -> None:
        super().__init__("stopped before the last question")
        self.answers = answers


def interview(
    questions: Mapping[str, Any],
    given: Mapping[str, str],
    rules: types.ModuleType | None,
    ask: Callable[[Question], str],
    tell: Callable[[str], None],
    also: Callable[[str, str], list[str]] = lambda key, answer: [],
) -> dict[str, str]:
    """Every answer the template asks for, in its order: ``given`` ones as given (already
    checked), the others from ``ask``, each checked at once (by the template's rules, then by
    ``also(key, answer)``) and asked again, with the reasons (to ``tell``), until it is good.
    When ``ask`` raises KeyboardInterrupt or EOFError,
    :class:`Interrupted` is raised with the answers so far."""
    from cookiecutter.prompt import render_variable
    from cookiecutter.utils import create_env_with_context

    env = create_env_with_context({"cookiecutter": dict(questions)})
    prompts = questions.get("__prompts__", {})
    rendered: dict[str, Any] = {}  # what cookiecutter's templates see: the answers and the private keys so far
    answers: dict[str, str] = {}
    for key, raw in questions.items():
        if key == "__prompts__":
            continue
        if key.startswith("_"):
            rendered[key] = raw if not key.startswith("__") else render_variable(env, raw, rendered)
            continue
        if isinstance(raw, (dict, bool)):  # shardkit's template has neither; cookiecutter's default is kept
            continue
        if key in given:
            answer = given[key]
        else:
            choices = tuple(choices_of(questions, rules, key, answers) or ())
            default = render_variable(env, raw, rendered)
            default = str(default[0]) if isinstance(default, list) else str(default)
            if key == "namespace" and default == PLACEHOLDER_NAMESPACE:
                default = ""  # no default: the placeholder is refused (see check_answer)
            text = prompts.get(key, key)
            if isinstance(text, dict):  # a choice's prompt: cookiecutter's {"__prompt__": ..., choice: label}
                text = text.get("__prompt__", key)
            question = Question(key, str(text), default, choices)
            while True:
                try:
                    answer = ask(question)
                except (KeyboardInterrupt, EOFError) as exc:
                    raise Interrupted(answers) from exc
                if not (problems := check_answer(questions, rules, key, answer, answers) or also(key, answer)):
                    break
                for problem in problems:
                    tell(problem)
        answers[key] = rendered[key] = answer
    return answers


def folder_problem(folder: str, *, overwrite: bool) -> str | None:
    """Why ``shardkit new`` may not write the repo folder ``folder``, or None. A folder holding a
    dataset pack-shards wrote is refused even with ``--overwrite``: the template's card would
    replace the user's own text and the configs pack-shards wrote (and pack-shards keeps an
    existing card up to date by itself)."""
    from .manifest import MANIFEST_NAME, WORK_DIR

    if not os.path.lexists(folder):
        return None
    packed = [name for name in (MANIFEST_NAME, WORK_DIR) if os.path.lexists(os.path.join(folder, name))]
    if packed:
        return (
            f'"{folder}" holds a dataset packed by shardkit ({packed[0]}); shardkit new would replace its card:'
            " choose another name (pack-shards keeps an existing card up to date by itself)"
        )
    if overwrite:
        return None
    return f'"{folder}" directory already exists; pass --overwrite to write into it, or choose another name'


def verbatim(value: str, questions: Mapping[str, Any]) -> str:
    """``value`` as an ``extra_context`` answer that cookiecutter's rendering leaves as it is:
    cookiecutter renders every answer as a Jinja template under ``no_input``, so a BibTeX
    ``title = {{BERT}}`` would be read as an expression. Such a value becomes a Jinja string
    literal (Jinja reads its escapes back: the JSON ones, and any character written as itself)."""
    from cookiecutter.utils import create_env_with_context

    env = create_env_with_context({"cookiecutter": dict(questions)})
    markers = (env.block_start_string, env.variable_start_string, env.comment_start_string)
    prefixes = (env.line_statement_prefix, env.line_comment_prefix)
    if not any(m in value for m in markers) and not any(p and p in value for p in prefixes):
        return value
    literal = json.dumps(value, ensure_ascii=False)
    return f"{env.variable_start_string} {literal} {env.variable_end_string}"


def rerun_command(
    answers: Mapping[str, str], options: Mapping[str, str | None], flags: tuple[str, ...] = ("--no-input",)
) -> str:
    """The ``shardkit new`` command that makes the same repo again without questions, shell-quoted:
    ``flags``, then ``options`` (e.g. ``-o``; left out when None), then every answer."""
    words = ["shardkit", "new", *flags]
    for option, value in options.items():
        if value is not None:
            words += [option, value]
    words += [f"{key}={value}" for key, value in answers.items()]
    return shlex.join(words)


def next_steps(repo_dir: str) -> list[str]:
    """What to run next in a folder ``shardkit new`` made, as its card says (README.md's hidden
    maintainer notes say the same): pack, verify, push; ``--class-label label`` for a
    classification task."""
    from .card import card_repo, split_front_matter

    try:
        with open(os.path.join(repo_dir, "README.md"), encoding="utf-8") as f:
            front, _ = split_front_matter(f.read())
    except (FileNotFoundError, ValueError):
        front = {}
    tasks = front.get("task_categories")
    classes = isinstance(tasks, list) and any(t in CLASSIFICATION_TASKS for t in tasks)
    where = shlex.quote(repo_dir)
    lines = [
        "next (also in README.md, in a comment the Hub does not show):",
        f"  pack-shards FILES_DIR METADATA_JSONL -o {where}",
        f"  shardkit verify {where} --deep",
        f"  shardkit push {where} --repo {card_repo(repo_dir) or 'NAMESPACE/NAME'}",
    ]
    if classes:
        lines.append(
            "  for a classification task: if the metadata has a `label` column of class names, add"
            " --class-label label to publish it as a ClassLabel; a `split` column makes one split per name"
        )
    return lines
