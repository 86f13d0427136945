"""Check the answers before anything is generated (stdlib only: this runs inside cookiecutter).

Hub repository names: 1 to 96 characters from letters, digits, '-', '_' and '.'; they may not
start or end with '-' or '.', contain '--' or '..', or end in '.git'. Namespaces (users and
organizations) follow the same rules. The license must be one of the Hub's license ids
(https://huggingface.co/docs/hub/repositories-licenses; the list is cookiecutter.json's
``__licenses``), the task one for the modality (``__tasks``), and a homepage, if given, an
http(s) URL (the card shows it as a link). The free text (title, description, citation, language)
holds no line that reads as one of the card's shardkit markers. A bad answer exits non-zero with
what is wrong.
"""

import json
import re
import sys

NAME = json.loads(r"""
{{ cookiecutter.dataset_name | tojson }}
""")
NAMESPACE = json.loads(r"""
{{ cookiecutter.namespace | tojson }}
""")
LICENSE = json.loads(r"""
{{ cookiecutter.license | tojson }}
""")
MODALITY = json.loads(r"""
{{ cookiecutter.modality | tojson }}
""")
TASK = json.loads(r"""
{{ cookiecutter.task_category | tojson }}
""")
LICENSES = json.loads(r"""
{{ cookiecutter.__licenses | tojson }}
""")
TASKS = json.loads(r"""
{{ cookiecutter.__tasks | tojson }}
""")
HOMEPAGE = json.loads(r"""
{{ cookiecutter.homepage | tojson }}
""")
FREE_TEXT = json.loads(r"""
{{ {"pretty_name": cookiecutter.pretty_name, "description": cookiecutter.description,
    "citation": cookiecutter.citation, "language": cookiecutter.language} | tojson }}
""")
ALLOWED = re.compile(r"[A-Za-z0-9._-]")
URL = re.compile(r"https?://[^\s<>\"'`]+")
MARKER_LINE = re.compile(r"^<!-- /?shardkit:", re.MULTILINE)


def problems(value: str, what: str) -> list:
    found = []
    if not value:
        return [f"{what} is empty"]
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


def choice_problems() -> list:
    found = []
    if LICENSE not in LICENSES:
        found.append(f"license {LICENSE!r} is not a Hub license id; use one of: {', '.join(LICENSES)}")
    tasks = TASKS.get(MODALITY, []) + TASKS["any"]
    if TASK not in tasks:
        found.append(f"task_category {TASK!r} does not fit modality {MODALITY!r}; use one of: {', '.join(tasks)}")
    for key, value in FREE_TEXT.items():
        if MARKER_LINE.search(value):
            found.append(f"{key} {value!r} has a line that reads as one of the card's shardkit markers; reword it")
    if HOMEPAGE and not URL.fullmatch(HOMEPAGE):
        found.append(f"homepage {HOMEPAGE!r} is not an http(s) URL (https://...); leave it out if there is none")
    return found


errors = problems(NAME, "dataset_name") + problems(NAMESPACE, "namespace") + choice_problems()
if errors:
    print("ERROR: " + "\nERROR: ".join(errors), file=sys.stderr)
    if any(e.startswith(("dataset_name", "namespace")) for e in errors):
        print("Example of a valid name: yfcc-openai-subset", file=sys.stderr)
    sys.exit(1)
