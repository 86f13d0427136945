"""Stage 5: the dataset card (README.md), and the files beside it pack keeps true.

One facts object feeds it: :func:`card_facts` builds a :class:`CardFacts` from the manifest (and
what only a pack knows), and :func:`write_card` writes the card from it; push names the repo in
its load examples with :func:`name_repo`, from the same facts. The modules:

* :mod:`.facts`: :class:`CardFacts` and :func:`card_facts`;
* :mod:`.frontmatter`: the YAML front matter (read, and set one key at a time), shardkit's
  sections between their markers, README.md read and written as it was;
* :mod:`.configs`: the keys shardkit sets in the front matter (``configs``, ``dataset_info``...);
* :mod:`.sections` and :mod:`.usage`: the text of each section, a function of the facts;
* :mod:`.readme`: writing the card, naming the repo in it, what keeps a card from being kept true;
* :mod:`.loaders`: the template's loading script and ``.gitattributes``.

What datasets' builtin loaders do with the shards is :mod:`shardkit.builtin`'s; the card asks
it, and names each format by its name, never by the format's own words.
"""

from __future__ import annotations

from .facts import LOADER_SUFFIX, CardFacts, card_facts
from .frontmatter import (
    SECTIONS,
    is_shardkit_card,
    read_front_matter,
    read_utf8,
    set_card_keys,
    set_front_matter_keys,
    set_section,
    split_front_matter,
)
from .loaders import (
    EARLIER_READERS,
    FEATURES_BEGIN,
    FEATURES_END,
    GITATTRIBUTES_LINES,
    TEMPLATE_LOADER,
    LoaderUpdate,
    normalised_reader,
    reader_code,
    template_reader,
    update_loaders,
)
from .readme import card_problem, card_repo, name_repo, write_card, write_card_files
from .sections import FORMAT_WORDS, LAYOUT_WORDS, features_section, human_size

__all__ = [
    "EARLIER_READERS",
    "FEATURES_BEGIN",
    "FEATURES_END",
    "FORMAT_WORDS",
    "GITATTRIBUTES_LINES",
    "LAYOUT_WORDS",
    "LOADER_SUFFIX",
    "SECTIONS",
    "TEMPLATE_LOADER",
    "CardFacts",
    "LoaderUpdate",
    "card_facts",
    "card_problem",
    "card_repo",
    "features_section",
    "human_size",
    "is_shardkit_card",
    "name_repo",
    "normalised_reader",
    "read_front_matter",
    "read_utf8",
    "reader_code",
    "set_card_keys",
    "set_front_matter_keys",
    "set_section",
    "split_front_matter",
    "template_reader",
    "update_loaders",
    "write_card",
    "write_card_files",
]
