"""Check the answers before anything is generated (stdlib only: this runs inside cookiecutter).

Hub repository names: 1 to 96 characters from letters, digits, '-', '_' and '.'; they may not
start or end with '-' or '.', contain '--' or '..', or end in '.git'. Namespaces (users and
organizations) follow the same rules. A bad answer exits non-zero with what is wrong.
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
ALLOWED = re.compile(r"^[A-Za-z0-9._-]+$")


def problems(value: str, what: str) -> list:
    found = []
    if not value:
        return [f"{what} is empty"]
    if len(value) > 96:
        found.append(f"{what} {value!r} is {len(value)} characters long; the Hub allows at most 96")
    bad = sorted({c for c in value if not ALLOWED.match(c)})
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


errors = problems(NAME, "dataset_name") + problems(NAMESPACE, "namespace")
if errors:
    print("ERROR: " + "\nERROR: ".join(errors), file=sys.stderr)
    print("Example of a valid name: yfcc-openai-subset", file=sys.stderr)
    sys.exit(1)
