"""The rules an answer to this template must follow: the one definition of each check.

Two callers, so neither can drift from the other: ``shardkit new`` loads this file to check each
answer when it is typed (and the KEY=VALUE answers before anything is asked), and
``pre_gen_project.py`` imports it to check every answer of a plain ``cookiecutter`` run before
anything is written. Stdlib only, and plain Python (cookiecutter renders only the hook itself).

``context`` is the template's questions: ``__licenses`` (the Hub's license ids,
https://huggingface.co/docs/hub/repositories-licenses) and ``__tasks`` (the tasks of each
modality; ``any`` fits every modality). ``answers`` are the answers given so far.
"""

import difflib
import re

ALLOWED = re.compile(r"[A-Za-z0-9._-]")
#: A homepage the card can show as a link: http(s), nothing that ends or breaks a markdown link.
URL = re.compile(r"https?://[^\s<>\"'`]+")
#: A line the card would read as one of shardkit's section markers (each is a line of its own):
#: free text that lands in the card may not hold one, or a pack would rewrite the user's text as
#: if it were a section.
MARKER_LINE = re.compile(r"^<!-- /?shardkit:", re.MULTILINE)
#: The answers written into the card as the user typed them.
FREE_TEXT = ("pretty_name", "description", "citation", "language")
#: The answers that are Hub names (a repository, a user or organization).
NAMES = ("dataset_name", "namespace")
LICENSES_PAGE = "https://huggingface.co/docs/hub/repositories-licenses"
#: A language code as the Hub's card takes it: ISO 639-1 or 639-3 (en, fra), with optional
#: BCP 47 subtags (pt-BR, zh-Hant).
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*")


def language_codes(value):
    """The codes of a language answer: one code or several separated by commas (and spaces).
    The card template splits the answer the same way (on ',' after removing spaces)."""
    return [code for code in value.replace(" ", "").split(",") if code]


def language_problems(value):
    """Why ``value`` is not one language code or several separated by commas."""
    codes = language_codes(value)
    if not codes:
        return ["language is empty; give a language code such as en (several: en, fr)"]
    bad = [code for code in codes if not LANGUAGE_CODE.fullmatch(code)]
    if bad:
        shown = ", ".join(repr(code) for code in bad)
        return [
            f"language {value!r}: {shown} is not a language code; give ISO 639 codes such as en, fr"
            " (several separated by commas)"
        ]
    return []


def name_problems(value, what):
    """Why ``value`` is not a Hub repository or namespace name: 1 to 96 characters from letters,
    digits, '-', '_' and '.', not starting or ending with '-' or '.', no '--' or '..', no '.git' end."""
    if not value:
        return [f"{what} is empty"]
    found = []
    if len(value) > 96:
        found.append(f"{what} {value!r} is {len(value)} characters long; the Hub allows at most 96")
    bad = sorted({c for c in value if not ALLOWED.fullmatch(c)})
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


def modality_of(answers, context):
    """The modality answered, or (not answered yet) cookiecutter's default: the first choice."""
    modality = answers.get("modality", context.get("modality", ""))
    if isinstance(modality, list):
        return modality[0] if modality else ""
    return modality


def tasks_for(answers, context):
    """The tasks that fit the modality (None: the template does not list tasks)."""
    tasks = context.get("__tasks")
    if not isinstance(tasks, dict):
        return None
    return [*tasks.get(modality_of(answers, context), []), *tasks.get("any", [])]


def choices(key, answers, context):
    """The only answers ``key`` takes, given the answers so far, or None for free text."""
    if key == "task_category":
        return tasks_for(answers, context)
    if key == "license" and isinstance(context.get("__licenses"), list):
        return list(context["__licenses"])
    return None


def answer_problems(key, value, answers, context):
    """Why ``value`` is not a good answer to ``key``, one line each (none: it is good)."""
    if key in NAMES:
        return name_problems(value, key)
    licenses = choices(key, answers, context) if key == "license" else None
    if licenses is not None:
        if value in licenses:
            return []
        close = [value.lower()] if value.lower() in licenses else difflib.get_close_matches(value.lower(), licenses, 3)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        listed = f"the ids are listed at {LICENSES_PAGE} (none fits: other)"
        return [f"license {value!r} is not a Hub license id{hint}; {listed}"]
    if key == "task_category":
        fitting = tasks_for(answers, context)
        if fitting is not None and value not in fitting:
            modality = modality_of(answers, context)
            return [f"task_category {value!r} does not fit modality {modality!r}; use one of: {', '.join(fitting)}"]
        return []
    if key in FREE_TEXT and MARKER_LINE.search(value):
        return [
            f"{key} {value!r} has a line that reads as one of the card's shardkit markers"
            " (<!-- shardkit:... -->), which would end the text there; reword it"
        ]
    if key == "language":
        return language_problems(value)
    if key == "homepage" and value and not URL.fullmatch(value):
        return [f"homepage {value!r} is not an http(s) URL (https://...); leave it out if there is none"]
    return []


def all_problems(context):
    """Every problem of a full set of answers (cookiecutter's context), in question order."""
    found = []
    for key, value in context.items():
        if not key.startswith("_") and isinstance(value, str):
            found.extend(answer_problems(key, value, context, context))
    return found
