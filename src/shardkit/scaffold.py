"""``shardkit new``: check the answers for a dataset repo template before anything is generated.

The template's own hook (``hooks/pre_gen_project.py``) checks the same rules, for people who run
cookiecutter directly; it must be stdlib-only and runs after every question is answered, so
shardkit checks what it can first: unknown keys (a typo such as ``licence=`` would otherwise be
ignored silently), choices, the Hub's license ids, the task for the modality, the names, and
that ``--no-input`` does not publish the template's placeholder namespace. The license and task
lists live in the template's ``cookiecutter.json`` (``__licenses``, ``__tasks``), one place for both.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from typing import Any

PLACEHOLDER_NAMESPACE = "your-username"
_ALLOWED = re.compile(r"[A-Za-z0-9._-]")
#: A homepage the card can show as a link: http(s), nothing that ends or breaks a markdown link.
_URL = re.compile(r"https?://[^\s<>\"'`]+")
#: A line the card would read as one of shardkit's section markers (each is a line of its own,
#: see card.py): free text that lands in the card (title, description, citation) may not hold one,
#: or a pack would rewrite the user's text as if it were a section.
_MARKER_LINE = re.compile(r"^<!-- /?shardkit:", re.MULTILINE)
#: The answers written into the card as the user typed them.
_FREE_TEXT = ("pretty_name", "description", "citation", "language")
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


def name_problems(value: str, what: str) -> list[str]:
    """Why ``value`` is not a Hub repository or namespace name (the hook's rules)."""
    if not value:
        return [f"{what} is empty"]
    found = []
    if len(value) > 96:
        found.append(f"{what} {value!r} is {len(value)} characters long; the Hub allows at most 96")
    bad = sorted({c for c in value if not _ALLOWED.fullmatch(c)})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        found.append(f"{what} {value!r} contains {shown}; use only letters, digits, '-', '_' and '.'")
    if value[0] in "-." or value[-1] in "-.":
        found.append(f"{what} {value!r} may not start or end with '-' or '.'")
    if "--" in value or ".." in value:
        found.append(f"{what} {value!r} may not contain '--' or '..'")
    if value.lower().endswith(".git"):
        found.append(f"{what} {value!r} may not end in '.git'")
    return found


def answer_problems(questions: dict[str, Any], answers: dict[str, str], *, no_input: bool) -> list[str]:
    """Everything wrong with ``answers`` (KEY=VALUE given to ``shardkit new``), one line each."""
    asked = [key for key in questions if not key.startswith("_")]
    found = []
    for key in answers:
        if key not in asked:
            close = difflib.get_close_matches(key, asked, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            found.append(f"unknown answer {key!r}{hint}; the questions are: {', '.join(asked)}")
    for key, value in answers.items():
        choices = questions.get(key)
        if isinstance(choices, list) and value not in choices:
            found.append(f"{key} {value!r} is not one of: {', '.join(map(str, choices))}")
    for key, what in (("dataset_name", "dataset_name"), ("namespace", "namespace")):
        if key in answers:
            found.extend(name_problems(answers[key], what))
    licenses = questions.get("__licenses")
    if "license" in answers and isinstance(licenses, list) and answers["license"] not in licenses:
        given = answers["license"]
        close = [given.lower()] if given.lower() in licenses else difflib.get_close_matches(given.lower(), licenses, 3)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        found.append(
            f"license {given!r} is not a Hub license id{hint}; the ids are listed at"
            " https://huggingface.co/docs/hub/repositories-licenses (other: license=other)"
        )
    tasks = questions.get("__tasks")
    if "task_category" in answers and isinstance(tasks, dict):
        modalities = questions.get("modality")
        modality = answers.get("modality") or (modalities[0] if isinstance(modalities, list) else "")
        fitting = [*tasks.get(modality, []), *tasks.get("any", [])]
        if answers["task_category"] not in fitting:
            found.append(
                f"task_category {answers['task_category']!r} does not fit modality {modality!r};"
                f" use one of: {', '.join(fitting)}"
            )
    for key in _FREE_TEXT:
        if key in answers and _MARKER_LINE.search(answers[key]):
            found.append(
                f"{key} {answers[key]!r} has a line that reads as one of the card's shardkit markers"
                " (<!-- shardkit:... -->), which would end the text there; reword it"
            )
    homepage = answers.get("homepage")
    if homepage and not _URL.fullmatch(homepage):
        found.append(f"homepage {homepage!r} is not an http(s) URL (https://...); leave it out if there is none")
    if no_input and questions.get("namespace") == PLACEHOLDER_NAMESPACE and "namespace" not in answers:
        found.append(
            "namespace: give the Hub user or organization that will own the dataset (namespace=NAME);"
            f" the placeholder {PLACEHOLDER_NAMESPACE!r} would be published in the card"
        )
    return found


def next_steps(repo_dir: str) -> list[str]:
    """What to run next in a folder ``shardkit new`` made, as its card says (README.md's hidden
    maintainer notes say the same): pack, verify, push; ``--class-label label`` for a
    classification task."""
    import shlex

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
