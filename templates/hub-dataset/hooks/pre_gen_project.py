"""Check the answers before anything is generated (stdlib only: this runs inside cookiecutter).

The rules are ``answer_rules.py`` beside this hook, the file ``shardkit new`` checks each answer
with as it is typed: one definition for both. A bad answer exits non-zero with what is wrong.
"""

import json
import os
import sys

CONTEXT = json.loads(r"""
{{ cookiecutter | tojson }}
""")
# cookiecutter runs a rendered copy of this hook from a temporary file: the rules are found
# through the template's folder, and no bytecode is left in it.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(CONTEXT["_repo_dir"], "hooks"))
from answer_rules import NAMES, all_problems  # noqa: E402

errors = all_problems(CONTEXT)
if errors:
    print("ERROR: " + "\nERROR: ".join(errors), file=sys.stderr)
    if any(e.startswith(NAMES) for e in errors):
        print("Example of a valid name: yfcc-openai-subset", file=sys.stderr)
    sys.exit(1)
