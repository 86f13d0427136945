"""The docs site builds, and no link into it leads nowhere.

The site (mkdocs.yml, docs/) is built with ``mkdocs build --strict``, whose validation settings
make a link to a missing page or heading an error: the first test builds it, the second shows
that a broken anchor really fails the build. README.md is not part of the site, so its links are
checked here, each heading's anchor made by the same Markdown extensions and slug rule as the
site's (mkdocs.yml's ``toc`` settings: GitHub's rule, so the anchors are also GitHub's).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import markdown
from mkdocs.config import load_config

from tests.support.corpus import REPO_ROOT


def build_site(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


@cache
def site_anchors(page: Path) -> frozenset[str]:
    """The anchor of every heading of ``page``, as the docs site makes them."""
    config = load_config(str(REPO_ROOT / "mkdocs.yml"))
    md = markdown.Markdown(extensions=config["markdown_extensions"], extension_configs=config["mdx_configs"])
    md.convert(page.read_text(encoding="utf-8"))
    found: set[str] = set()
    tokens = list(md.toc_tokens)  # set by the toc extension
    while tokens:
        token = tokens.pop()
        found.add(token["id"])
        tokens.extend(token["children"])
    return frozenset(found)


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file, or heading in a Markdown file, does not exist."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans show links, they are none
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in site_anchors(linked)):
            broken.append(target)
    return broken


def test_the_docs_site_builds_with_every_link_and_anchor_found(tmp_path: Path) -> None:
    built = build_site(REPO_ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    pages = sorted(p.parent.name for p in (tmp_path / "site").glob("*/index.html"))
    written = (p.stem for p in (REPO_ROOT / "docs").glob("*.md") if not p.stem.startswith("incoming-"))
    assert pages == sorted(stem for stem in written if stem != "index")  # every page, each in the nav
    assert 'href="reference/"' in (tmp_path / "site" / "index.html").read_text()  # the home page, docs/index.md


def test_a_broken_anchor_fails_the_build(tmp_path: Path) -> None:
    shutil.copy(REPO_ROOT / "mkdocs.yml", tmp_path)
    shutil.copytree(REPO_ROOT / "docs", tmp_path / "docs")
    status = tmp_path / "docs" / "status.md"
    assert "(reference.md#limits)" in status.read_text()
    status.write_text(status.read_text().replace("(reference.md#limits)", "(reference.md#limitz)"))
    built = build_site(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert (
        "contains a link 'reference.md#limitz', but the doc 'reference.md' does not contain an anchor" in built.stderr
    )


def test_readme_links_lead_to_a_file_and_heading_that_exist() -> None:
    """README.md is not in the site: its links into docs/ (and to its own headings) are checked here."""
    assert "limits" in site_anchors(REPO_ROOT / "docs" / "reference.md")
    assert broken_links(REPO_ROOT / "README.md") == []


def test_a_link_to_a_missing_heading_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Write to a bucket: `-o s3://bucket/name`\n")
    page.write_text(
        "# Page\n\n[ok](other.md#write-to-a-bucket--o-s3bucketname) [ok](#page) [`x`](other.md)\n"
        "[bad](other.md#write-to-a-bucket-o-s3bucketname) [bad](#pages) [bad](missing.md)\n"
        "```\n[in a fence](nowhere.md)\n```\n"
    )
    # The GitHub rule: punctuation dropped, each space a hyphen (MkDocs' default would make one of "--").
    assert broken_links(page) == ["other.md#write-to-a-bucket-o-s3bucketname", "#pages", "missing.md"]
