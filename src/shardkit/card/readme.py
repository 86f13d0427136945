"""Stage 5: keep the dataset card (README.md) true to what was packed, and name the repo in it
when it is pushed. A new card is shardkit's sections under a title; an existing one keeps its
text and every key shardkit does not set (:mod:`.configs` says which it sets)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import replace
from typing import Any

import yaml

from ..errors import UsageError
from ..manifest import Manifest
from .configs import first_config_problem, front_matter_keys
from .facts import CardFacts, card_facts
from .frontmatter import (
    find_section,
    front_matter_end,
    minimal_body,
    read_card,
    read_utf8,
    set_front_matter_keys,
    set_section,
    split_front_matter,
    write_card_text,
)
from .loaders import LoaderUpdate, ensure_gitattributes, update_loaders
from .sections import features_section, layout_section, license_section, stats_section
from .usage import known_repo, usage_of, usage_section

log = logging.getLogger(__name__)

# What shardkit before its card sections wrote after the stats of a card it made: replaced by
# the sections (it named no repo: `<namespace>` stood for it).
_OLD_LOAD_BLOCK = re.compile(
    r"\n\n## Load it\n\nFastest, one shard per shard file for DataLoader workers, datasets 3\.6 and 5\.x \(needs"
    r" shardkit, which is not on PyPI: `pip install \./shardkit` from a clone of its repository\):\n\n"
    r"```python\nimport shardkit\n\nds = shardkit\.stream\(\"<namespace>/(?P<title>[^\n]*)\"\)\n```\n\n"
    r"With datasets alone \(the builtin loader; types as declared above\):\n\n"
    r"```python\nfrom datasets import load_dataset\n\n"
    r"ds = load_dataset\(\"<namespace>/(?P=title)\", split=\"train\", streaming=True\)\n```\n\Z"
)
#: Each modality, and the one a card's tags may wrongly name.
_OTHER_MODALITY = {"image": "audio", "audio": "image"}


def write_card(out_dir: str, facts: CardFacts) -> str:
    """Create OUT_DIR's README.md, or set its ``configs`` (pointed at these shards),
    ``size_categories``, ``dataset_info`` and shardkit's sections of the text; return its path."""
    path = os.path.join(out_dir, "README.md")
    try:
        text, bom, crlf = read_card(path)
    except FileNotFoundError:
        # No pretty_name, license or tags: keys a new card leaves empty are the user's (or a
        # remux's, from its source) to set. set_front_matter_keys puts the front matter on.
        text, bom, crlf = minimal_body(facts.title), "", False
    data, body = split_front_matter(text)
    _warn_of_other_modality(path, data, facts.modality)
    new_body = _OLD_LOAD_BLOCK.sub("\n", body) if find_section(body, "usage") is None else body
    found = find_section(new_body, "usage")
    usage = replace(usage_of(facts, found[2] if found else {}), builtin=facts.builtin_note is None)
    new_body = set_section(new_body, "stats", stats_section(facts))
    new_body = set_section(new_body, "features", features_section(facts))
    new_body = set_section(new_body, "usage", usage_section(usage), usage.attrs)
    new_body = set_section(new_body, "layout", layout_section(facts))
    new_body = set_section(new_body, "license", license_section(data))
    text = text[: len(text) - len(body)] + new_body  # body is what follows the front matter
    text = set_front_matter_keys(text, front_matter_keys(facts, data))
    write_card_text(path, text, bom, crlf)
    return path


def _warn_of_other_modality(path: str, data: dict[str, Any], modality: str) -> None:
    """A card whose tags say audio for images (or images for audio): the user's text to fix."""
    other = _OTHER_MODALITY.get(modality)
    tags = data.get("tags")
    if other and isinstance(tags, list) and other in tags and modality not in tags:
        log.warning(
            "%s says the dataset is %s (tags: %s) but the packed files are %s: edit its tags, task and description",
            path,
            other,
            ", ".join(map(str, tags)),
            modality,
        )


def card_repo(out_dir: str) -> str | None:
    """The Hub repo OUT_DIR's card names in its load examples (``shardkit new``'s answers, or the
    last push); None if it names none."""
    try:
        text, _, _ = read_card(os.path.join(out_dir, "README.md"))
    except FileNotFoundError:
        return None
    found = find_section(text, "usage")
    return known_repo(found[2].get("repo")) if found else None


def name_repo(out_dir: str, repo_id: str, revision: str, manifest: Manifest) -> str | None:
    """Write ``repo_id`` (and a branch other than main) into the load examples of OUT_DIR's
    card, so that the card push publishes names the repo it is in; the next pack keeps it.
    Only shardkit's usage section changes. Returns the card's path if it changed; None if it
    named the repo already, or has no usage section (a card of an older shardkit: the next pack
    adds one)."""
    path = os.path.join(out_dir, "README.md")
    try:
        text, bom, crlf = read_card(path)
    except FileNotFoundError:
        return None
    end = front_matter_end(text)
    head, body = (text[: end + 5], text[end + 5 :]) if end != -1 else ("", text)
    found = find_section(body, "usage")
    if found is None:
        return None
    # Whether the builtin loader reads the shards is what the pack found (the marker says it).
    usage = replace(usage_of(card_facts(manifest, out_dir), found[2]), repo=repo_id, revision=revision)
    new_body = set_section(body, "usage", usage_section(usage), usage.attrs)
    if new_body == body:
        return None
    write_card_text(path, head + new_body, bom, crlf)
    return path


def card_problem(out_dir: str) -> str | None:
    """Why shardkit cannot keep OUT_DIR's README.md true (None if it can), checked before a pack
    writes anything: it must be UTF-8 with YAML front matter that parses, and a ``configs``
    list must read the shards first (datasets picks the builder of every config from the first
    one's files, so shards behind another first config could not be loaded)."""
    path = os.path.join(out_dir, "README.md")
    try:
        text = read_utf8(path)
    except FileNotFoundError:
        return None
    except UsageError as exc:
        return str(exc)
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    try:
        data, _ = split_front_matter(text)
        # shardkit's own edit, tried now on the values there: a card it cannot edit fails here,
        # not after every shard is written.
        keys: dict[str, Any] = {"configs": data.get("configs") or [], "size_categories": [], "dataset_info": {}}
        set_front_matter_keys(text, keys)
    except (yaml.YAMLError, ValueError) as exc:
        reason = str(exc).splitlines()[0]
        return f"{path}: its YAML front matter does not parse ({reason}); fix it, then run the command again"
    problem = first_config_problem(data.get("configs"))
    return f"{path}: {problem}" if problem else None


def write_card_files(out_dir: str, facts: CardFacts) -> LoaderUpdate:
    """What a pack keeps true beside its shards: the card (:func:`write_card`), the LFS rules of
    ``.gitattributes``, and the features (and reader code) of the template's loading script, when
    it reads this format (datasets reads tar and Parquet itself)."""
    write_card(out_dir, facts)
    ensure_gitattributes(out_dir)
    if not facts.fmt.loading_script:
        return LoaderUpdate()
    return update_loaders(out_dir, facts.columns)
