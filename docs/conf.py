"""Sphinx configuration of the tutorial site: `make html` (``python -m course.publishing.site``).

The sources are not in this folder: ``course.publishing.site`` stages each edition (the executed notebooks,
rendered from their stored outputs, plus the index, glossary and troubleshooting pages) into
``build/site-src/<edition>/`` and runs Sphinx on it with this folder as the configuration
directory. What differs between the English and the Chinese edition comes in a small JSON file
named by ``COMPANION_SITE`` (written by ``course.publishing.site``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sphinx.search.zh import SearchChinese

_edition = {"language": "en", "title": "PyTorch data pipelines & distributed training",
            "switch": None}
if os.environ.get("COMPANION_SITE"):
    _edition |= json.loads(Path(os.environ["COMPANION_SITE"]).read_text(encoding="utf-8"))

project = "torch-pipelines-companion"
author = "The torch-pipelines-companion contributors"
copyright = "2026, " + author  # Sphinx's name
language = _edition["language"]
html_title = _edition["title"]

extensions = ["myst_nb"]
# Render the committed outputs; never execute at build time.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "deflist"]
# Anchors for the headings, so that links such as `02_x.ipynb#summary` resolve.
myst_heading_anchors = 3
exclude_patterns = ["_files/**", "**.ipynb_checkpoints", "_site.json"]
# The guide's listing in 02_3 has a literal "…"; Pygments then falls back to relaxed mode.
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]

html_theme = "sphinx_book_theme"
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["site.css"]
# Chinese word splitting (jieba, offline dictionary) for both editions: the English chapters carry
# the guide's Chinese headings, and the splitter also indexes (and stems) the English words.
html_search_language = "zh"
# The glossary's Chinese terms as jieba words, so that "数据管道" is one searchable word.
html_search_options = {"dict": _edition["jieba_dict"]} if _edition.get("jieba_dict") else {}
html_show_sourcelink = False
html_copy_source = True
# The header already has the search field.
html_sidebars = {"**": ["navbar-logo.html", "lang-switch.html", "sbt-sidebar-nav.html"]}
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
    "footer_content_items": [],
}
html_favicon = "_static/favicon.svg"
# A first visit has no stored theme mode; without a default the theme logs a console error.
html_context = {"companion_switch": _edition["switch"], "default_mode": "light"}


def _fix_chinese_stemmer(app, exception) -> None:
    """Sphinx 9.0 names the search stemmer after the language (``ChineseStemmer``) but ships the
    English one for ``zh``, so every page would throw a ReferenceError; point it at the English
    stemmer that the Chinese splitter indexes Latin words with."""
    path = Path(app.outdir) / "_static" / "language_data.js"
    if exception is None and path.is_file():
        text = path.read_text(encoding="utf-8")
        if "window.Stemmer = ChineseStemmer;" in text and "var EnglishStemmer" in text:
            path.write_text(text.replace("window.Stemmer = ChineseStemmer;",
                                         "window.Stemmer = EnglishStemmer;"), encoding="utf-8")


class _RememberingStemmer:
    """The English stemmer, remembering its answers for the whole build (Sphinx's own memo lasts
    one page, and most words are stemmed on every page)."""

    def __init__(self, stemmer) -> None:
        self._stem_word = stemmer.stemWord
        self._stems: dict[str, str] = {}

    def stemWord(self, word: str) -> str:  # snowballstemmer's name
        if word not in self._stems:
            self._stems[word] = self._stem_word(word)
        return self._stems[word]


class _RememberingChinese(SearchChinese):
    """Sphinx's Chinese search language (jieba for Chinese words, the English stemmer for Latin
    ones), splitting each whitespace-separated piece of text once per build.

    Sphinx runs jieba over every text of every page, English included, and jieba's pure-Python
    segmentation of the same words ("the", "model", "loader") again and again was about a fifth
    of the Chinese edition's build. Both jieba's cuts and Sphinx's Latin words end at whitespace
    (neither a Chinese block nor a word holds any), so splitting piece by piece gives exactly
    the words of splitting the whole text; the pieces repeat, and their words are remembered.
    The search index is the same, byte for byte.
    """

    _pieces = re.compile(r"(\s+)")

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.stemmer = _RememberingStemmer(self.stemmer)
        self._words: dict[str, list[str]] = {}

    def split(self, input: str) -> list[str]:
        words = []
        for piece in self._pieces.split(input):
            if piece and piece not in self._words:
                self._words[piece] = super().split(piece)
            words += self._words.get(piece, ())
        return words


def setup(app):
    app.add_search_language(_RememberingChinese)
    app.connect("build-finished", _fix_chinese_stemmer)
    return {"parallel_read_safe": True}
