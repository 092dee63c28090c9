"""Tests for course/publishing/site.py and course/publishing/site_pages.py: the Sphinx site, built from tiny notebooks
(both editions) and once from the repository, checked by a link checker and in a real Chromium."""

from __future__ import annotations

import functools
import http.server
import re
import threading
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import nbformat
import pytest
from nbclient import NotebookClient
from PIL import Image

from course.publishing.site import (
    MARKER,
    build_site,
    freeze_widgets,
    main,
    parse_first_cell,
    rewrite_links,
)
from tests.browser import Browser, find_chromium
from tests.system_parts import require

REPO = Path(__file__).resolve().parents[2]
FIRST = "# Chapter 1 — First steps\n**Guide sections:** §2.1.1 数据管道定义 · §1.1 深度学习的基本概念\n"
PAGES = ["index.html", "chapters/01_first.html", "chapters/02_second.html",
         "chapters/exercises/ex01_ex.html", "chapters/exercises/solutions/ex01_ex.html", "GLOSSARY.html",
         "TROUBLESHOOTING.html"]
TITLES = ["Chapter 1 — First steps", "Chapter 2 — Second", "Exercises 1", "Exercises 1 (solutions)"]
#: The tiny instructor source's solution: on its page of the Solutions part, never anywhere else.
SOLUTION = "return 'the tiny solution'"


def markdown(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(text)


def executed_by_hand(title: str, sections: str | None, code: str, *more: str) -> nbformat.NotebookNode:
    """A notebook that looks executed (count 1, a stream output) without starting a kernel."""
    head = f"# {title}\n" + (f"**Guide sections:** {sections}\n" if sections else "")
    cell = nbformat.v4.new_code_cell(code, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hello\n")]
    nb = nbformat.v4.new_notebook(cells=[markdown(head), *map(markdown, more), cell])
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def first_chapter() -> nbformat.NotebookNode:
    """Chapter 1, executed for real: a tqdm bar (a widget), a printed value and a plot."""
    nb = nbformat.v4.new_notebook(cells=[
        markdown(FIRST + "[Glossary / 术语表](../GLOSSARY.md)\n## What you will learn\n- a plot"),
        markdown("See [the next chapter](02_second.ipynb#Summary), [the loader code]"
                 "(../common/fake.py) and [PyTorch](https://pytorch.org).\n\n"
                 "![a ring](figures/ring.svg)"),
        nbformat.v4.new_code_cell("from tqdm.auto import tqdm\nfor step in tqdm(range(5), "
                                  "desc='steps'):\n    pass\nprint('sum of squares', 55)"),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\n"
                                  "plt.title('a curve')\nplt.show()"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    return nb


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    (root / "chapters" / "exercises").mkdir(parents=True)
    (root / "chapters" / "zh").mkdir()
    (root / "common").mkdir()
    (root / "common" / "fake.py").write_text("LOADER = 'code'\n")
    (root / "chapters" / "figures" / "zh").mkdir(parents=True)  # common.diagrams' layout
    for figure, words in (("figures/ring.svg", "ring"), ("figures/zh/ring.svg", "环")):
        (root / "chapters" / figure).write_text(
            '<svg xmlns="http://www.w3.org/2000/svg" width="80" height="20">'
            f'<text x="2" y="15">{words}</text></svg>', encoding="utf-8")
    nbformat.write(first_chapter(), root / "chapters" / "01_first.ipynb")
    (root / "chapters" / "01_first.py").write_text("# %%\nprint('twin')\n")
    nbformat.write(executed_by_hand("Chapter 2 — Second", "beyond the guide (continues §2.3.1 "
                                    "自定义数据集的创建)", "print('hello')",
                                    "A quokka appears.\n## Summary\n- done"),
                   root / "chapters" / "02_second.ipynb")
    draft = executed_by_hand("Chapter 3 — Draft", "§2.2.2 数据增强与归一化", "x = 1")
    draft.cells[1].execution_count = None
    nbformat.write(draft, root / "chapters" / "03_draft.ipynb")
    # An exercise: its student version (unexecuted, as committed) and its instructor source.
    (root / "chapters" / "exercises" / "solutions").mkdir()
    student = executed_by_hand("Exercises 1", "§2.1.1 数据管道定义", "def f():\n    raise NotImplementedError()")
    student.cells[-1].execution_count, student.cells[-1].outputs = None, []
    nbformat.write(student, root / "chapters" / "exercises" / "ex01_ex.ipynb")
    nbformat.write(executed_by_hand("Exercises 1 (solutions)", "§2.1.1 数据管道定义",
                                    f"def f():\n    ### BEGIN SOLUTION\n    {SOLUTION}\n    ### END SOLUTION"),
                   root / "chapters" / "exercises" / "solutions" / "ex01_ex.ipynb")
    # An instructor source left in the learner's folder by mistake: never published as an exercise.
    nbformat.write(executed_by_hand("Exercises 2", None, f"### BEGIN SOLUTION\n{SOLUTION}\n### END SOLUTION"),
                   root / "chapters" / "exercises" / "ex02_misplaced.ipynb")
    # A stand-in for the Chinese edition: one chapter, linking to the glossary.
    nbformat.write(executed_by_hand("第 1 章 — 第一步", None, "print('hello')",
                                    "[术语表](../../GLOSSARY.md)\n\n本章介绍数据管道。\n\n"
                                    "![环](../figures/zh/ring.svg)"),
                   root / "chapters" / "zh" / "01_first.ipynb")
    (root / "GLOSSARY.md").write_text("# Glossary\n\n| 中文 | English |\n|---|---|\n"
                                      "| 数据管道 | data pipeline ([ch. 1](chapters/01_first.ipynb)) |\n")
    (root / "TROUBLESHOOTING.md").write_text("# Troubleshooting\n\nSee the [glossary](GLOSSARY.md).\n")
    return root


@pytest.fixture(scope="module")
def site(tiny_repo, tmp_path_factory):
    """The tiny repository's site with its Solutions part (``--solutions``), built over an earlier
    build of ours (a stale page in it). The real repository's build below is the default one."""
    out = tmp_path_factory.mktemp("site") / "html"
    out.mkdir()
    (out / MARKER).write_text("")
    (out / "stale.html").write_text("old")
    chapters, warnings = build_site(tiny_repo, out, with_solutions=True)
    return out, chapters, warnings


class Links(HTMLParser):
    """Every href/src in a page, the ids it defines, and the text of its h1 headings."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.h1: list[str] = []
        self._in_h1 = False

    def handle_starttag(self, tag, attrs):
        self.links += [value for name, value in attrs if name in ("href", "src") and value]
        self.ids |= {value for name, value in attrs if name == "id" and value}
        self._in_h1 = self._in_h1 or tag == "h1"

    def handle_endtag(self, tag):
        self._in_h1 = self._in_h1 and tag != "h1"

    def handle_data(self, data):
        if self._in_h1 and data.strip() not in ("", "#"):
            self.h1.append(data.strip())


def parse(page: Path) -> Links:
    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def broken_links(out: Path) -> list[str]:
    """The link checker: every relative href/src of every page names an existing file, and
    every fragment of a link to a page names an id on that page."""
    parsed = {page: parse(page) for page in out.rglob("*.html") if "_static" not in page.parts}
    broken = []
    for page, links in parsed.items():
        for link in links.links:
            if re.match(r"^[a-z][a-z0-9+.-]*:", link) or link.startswith("//"):
                continue
            path, _, fragment = link.partition("#")
            target = (page.parent / unquote(path.split("?")[0])).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(out)}: {link}")
            elif fragment and target.suffix == ".html" and unquote(fragment) not in parsed[target].ids:
                broken.append(f"{page.relative_to(out)}: {link} (no such anchor)")
    return broken


def test_parse_first_cell():
    nb = executed_by_hand("Chapter 9 — Nine", "§2.2.1 Dataset与DataLoader类", "x = 1")
    assert parse_first_cell(nb, "nine.ipynb") == ("Chapter 9 — Nine", "§2.2.1 Dataset与DataLoader类")
    assert parse_first_cell(executed_by_hand("Untitled", None, "x"), "u.ipynb") == ("Untitled", "")
    nb.cells[0].source = "Some text, no title"
    with pytest.raises(ValueError, match="nine.ipynb"):
        parse_first_cell(nb, "nine.ipynb")


def test_pages_of_both_editions_written_and_unexecuted_notebook_reported(site):
    out, chapters, warnings = site
    assert [c.page for c in chapters] == PAGES[1:5]
    for page in PAGES + ["search.html", "zh/index.html", "zh/chapters/01_first.html",
                         "zh/GLOSSARY.html", "zh/search.html"]:
        assert (out / page).is_file(), page
    assert not (out / "chapters" / "03_draft.html").exists()
    assert not (out / "chapters" / "exercises" / "ex02_misplaced.html").exists()
    assert warnings == ["chapters/03_draft.ipynb: not executed (run `python -m course.publishing.notebooks "
                        "build` on it)",
                        "chapters/exercises/ex02_misplaced.ipynb: holds solutions or hidden checks, so it is "
                        "no student version (instructor sources go in exercises/solutions/; `make assignments`)"]


def test_solutions_are_a_part_of_their_own_and_only_there(site):
    """The student version is an exercise page; the instructor source is in the Solutions part."""
    out, _, _ = site
    index = (out / "index.html").read_text(encoding="utf-8")
    assert index.index(">Exercises<") < index.index(">Solutions<")
    assert "not part of this site" not in index, "the default site's words, not this one's"
    nav = index.split('class="bd-sidebar-primary', 1)[1]
    assert nav.index("Exercises") < nav.index("Exercises 1") < nav.index("Solutions") \
        < nav.index("Exercises 1 (solutions)")
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        shown = page.relative_to(out).as_posix() == "chapters/exercises/solutions/ex01_ex.html"
        assert ("the tiny solution" in text) == shown, page


def test_index_has_the_chapter_map_both_ways_and_the_sidebar_every_chapter(site):
    out, _, _ = site
    text = (out / "index.html").read_text(encoding="utf-8")
    assert "Chapter map" in text and "beyond the guide (continues §2.3.1" in text
    reverse = text[text.index("Guide sections → notebooks<a"):]
    assert reverse.index("§1.1 深度学习的基本概念") < reverse.index("§2.1.1 数据管道定义")
    for page in PAGES:
        nav = (out / page).read_text(encoding="utf-8").split('class="bd-sidebar-primary', 1)[1]
        positions = [nav.index(title) for title in TITLES]
        assert positions == sorted(positions), page  # in reading order


def test_chapter_page_has_info_box_downloads_prev_next_and_in_page_toc(site):
    out, _, _ = site
    page = out / "chapters" / "01_first.html"
    text, links = page.read_text(encoding="utf-8"), parse(page).links
    box = text[text.index("page-info"):]
    assert "§2.1.1 数据管道定义" in box[:2000]
    downloads = [link for link in links if "_downloads/" in link]
    assert {Path(d).name for d in downloads} >= {"01_first.ipynb", "01_first.py"}
    assert all((page.parent / d).is_file() for d in downloads)
    assert (page.parent / next(d for d in downloads if d.endswith(".py"))).read_text() == \
        "# %%\nprint('twin')\n"
    assert 'class="right-next"' in text and "02_second.html" in text  # next
    assert 'class="left-prev"' in text  # previous: the index
    assert "bd-toc" in text and "What you will learn" in text  # in-page contents
    assert parse(page).h1[0].startswith("Chapter 1 — First steps")


def test_links_point_at_pages_and_copied_files_and_the_site_is_offline(site):
    out, _, _ = site
    links = parse(out / "chapters" / "01_first.html").links
    assert "../GLOSSARY.html" in links and "02_second.html#summary" in links
    assert "https://pytorch.org" in links
    fake = [link for link in links if link.endswith("fake.py")]
    assert fake and (out / "chapters" / fake[0]).read_text() == "LOADER = 'code'\n"
    text = (out / "chapters" / "01_first.html").read_text(encoding="utf-8")
    assert re.search(r'<img[^>]+src="../_images/[^"]+\.png"', text) and "sum of squares 55" in text
    assert re.search(r"steps: 100%\|█+\| 5/5", text) and "widget-view+json" not in text
    for page in out.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', html), page.name


def test_diagrams_show_in_both_editions(site):
    """chapters/figures/ (English) and chapters/figures/zh/ (linked as ../figures/zh/ from zh)."""
    out, _, warnings = site
    for page, words in (("chapters/01_first.html", "ring"), ("zh/chapters/01_first.html", "环")):
        sources = re.findall(r'<img[^>]+src="([^"]+\.svg)"', (out / page).read_text(encoding="utf-8"))
        assert len(sources) == 1, page
        shown = (out / page).parent / sources[0]
        assert shown.is_file() and words in shown.read_text(encoding="utf-8"), page
    assert not [w for w in warnings if "ring.svg" in w]


def test_no_broken_relative_link_in_the_whole_site(site):
    out, _, _ = site
    assert broken_links(out) == []


def test_language_switch_on_every_page_of_both_editions(site):
    out, _, _ = site
    for page in PAGES:
        switch = [link for link in parse(out / page).links if "zh/" in link]
        # The Chinese stand-in has only chapter 1: the other chapters switch to its index.
        expected = page if "0" not in page or page == "chapters/01_first.html" else "index.html"
        assert switch and (out / page).parent.joinpath(switch[0]).resolve() == \
            (out / "zh" / expected).resolve(), page
    back = [link for link in parse(out / "zh" / "chapters" / "01_first.html").links
            if link.endswith("chapters/01_first.html") and "../" in link]
    assert (out / "zh" / "chapters" / back[0]).resolve() == (out / "chapters" / "01_first.html")
    zh = (out / "zh" / "chapters" / "01_first.html").read_text(encoding="utf-8")
    assert 'lang="zh-CN"' in zh and "§2.1.1 数据管道定义" in zh  # sections from the English one
    assert "../GLOSSARY.html" in parse(out / "zh" / "chapters" / "01_first.html").links


def test_rewrite_links_turns_dead_links_into_text(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "09_draft.ipynb").write_text("{}")
    warnings: list[str] = []
    files: set[str] = set()
    text = ("[a](missing.ipynb) [b](#local) [c](mailto:x@y.z) [d](../GLOSSARY.md#Data) "
            "![img](figs/p.png) [draft](09_draft.ipynb)")
    new = rewrite_links(text, source="chapters/01.ipynb", page="chapters/01.ipynb",
                        pages={"GLOSSARY.md": "GLOSSARY.md"}, root=tmp_path, files=files,
                        warnings=warnings)
    assert new == "a [b](#local) [c](mailto:x@y.z) [d](../GLOSSARY.md#data) img draft"
    assert len(warnings) == 3 and "'missing.ipynb' is not in the site" in warnings[0]
    assert "figs/p.png" in warnings[1] and "09_draft.ipynb" in warnings[2]
    assert files == set()


def test_freeze_widgets_uses_the_final_state():
    state = {"box": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_l", "IPY_MODEL_p",
                                                                       "IPY_MODEL_r"]}},
             "l": {"model_name": "HTMLModel", "state": {"value": "load:\u200750%"}},
             "p": {"model_name": "FloatProgressModel", "state": {"value": 2.0, "max": 4.0}},
             "r": {"model_name": "HTMLModel", "state": {"value": "\u20072/4 [00:01&lt;00:01]"}}}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("bar")])
    nb.cells[0].outputs = [nbformat.v4.new_output("display_data", data={
        "text/plain": "load:   0%", "application/vnd.jupyter.widget-view+json": {"model_id": "box"}})]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    freeze_widgets(nb)
    assert nb.cells[0].outputs[0].data == {"text/plain": "load: 50%|█████     | 2/4 [00:01<00:01]"}
    assert "widgets" not in nb.metadata


def test_output_folder_is_rebuilt_but_a_foreign_one_is_refused(site, tiny_repo, tmp_path):
    out, _, _ = site  # built over our own earlier build: its stale page is gone
    assert (out / MARKER).is_file() and not (out / "stale.html").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="foreign"):
        build_site(tiny_repo, foreign)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_the_solutions_are_one_deliberate_flag_away(tiny_repo, tmp_path, monkeypatch):
    """By default the site has the student versions only; ``--solutions`` reaches the build and adds
    the instructor sources (the build itself is the fixture's; one build)."""
    import course.publishing.site
    from course.publishing.site_pages import EDITIONS, find_chapters

    asked = []
    monkeypatch.setattr(course.publishing.site, "build_site", lambda root, out, **kw: asked.append(kw) or ([], []))
    assert main(["--root", str(tiny_repo), "--out", str(tmp_path / "html")]) == 0
    assert main(["--root", str(tiny_repo), "--out", str(tmp_path / "html"), "--solutions"]) == 0
    assert asked == [{"with_solutions": False}, {"with_solutions": True}]
    chapters, _ = find_chapters(tiny_repo, EDITIONS["en"])
    assert [c.source for c in chapters if "exercises" in c.source] == ["chapters/exercises/ex01_ex.ipynb"]
    everything, _ = find_chapters(tiny_repo, EDITIONS["en"], with_solutions=True)
    assert [c.source for c in everything if c.is_solution] == ["chapters/exercises/solutions/ex01_ex.ipynb"]


def test_docs_link_only_to_files_that_exist():
    for doc in ("GLOSSARY.md", "TROUBLESHOOTING.md"):
        text = (REPO / doc).read_text(encoding="utf-8")
        targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s#][^)\s]*)\)", text)
                   if not re.match(r"[a-z]+:", t)}
        missing = sorted(t for t in targets if not (REPO / t).is_file())
        assert not missing, f"{doc} links to files that do not exist: {missing}"


def serve(folder: Path) -> http.server.ThreadingHTTPServer:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def chromium() -> str:
    executable = find_chromium()
    require("Chromium", None if executable else "no chromium, chromium-browser or google-chrome on PATH: "
            "the browser tests need it (`make system-deps`; Debian/Ubuntu: sudo apt-get install -y chromium)")
    return executable


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):
    """One Chromium for the module's browser tests (each site is served on a port, an origin,
    of its own, so no page sees another site's storage)."""
    with Browser(chromium, tmp_path_factory.mktemp("browser") / "profile") as opened:
        yield opened


def search(browser: Browser, base: str, words: str) -> list[str]:
    """The result links of the site's own search page for ``words``."""
    browser.open(f"{base}/search.html?q={words}")
    browser.wait_until("(document.querySelector('#search-results .search-summary') || {})"
                       ".textContent", timeout=30)
    return browser.evaluate("Array.from(document.querySelectorAll('#search-results li a'))"
                            ".map(a => a.getAttribute('href'))")


def assert_no_solution_is_published(out: Path) -> None:
    """No file of the site (pages, sources, downloads, search index) holds a solution's marker, no
    page is an instructor source's, and no exercise page's text holds a line that only the solutions
    and hidden checks of its instructor source hold (the chapters share many lines with them)."""
    from course.assignments import instructor_sources
    from tests.helpers import solution_lines

    for path in (p for p in out.rglob("*") if p.is_file() and p.suffix in (".html", ".ipynb", ".py", ".js", ".txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, path
    assert not [p for p in out.rglob("*.html") if "solutions" in p.relative_to(out).parts]
    for edition, folder in (("", REPO / "chapters"), ("zh", REPO / "chapters" / "zh")):
        sources = instructor_sources(folder / "exercises" / "solutions")
        assert sources
        for source in sources:
            secret = solution_lines(nbformat.read(source, as_version=4))
            page = out / edition / "chapters" / "exercises" / source.with_suffix(".html").name
            lines = {line.strip() for line in unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))).splitlines()}
            assert len(secret) > 10 and not secret & lines, f"{page.relative_to(out)}: {sorted(secret & lines)[:3]}"


@pytest.fixture(scope="module")
def repository_site(tmp_path_factory):
    """This repository's site, built the default way (no solutions), into a temporary folder."""
    out = tmp_path_factory.mktemp("repository") / "html"
    chapters, warnings = build_site(REPO, out)
    return out, chapters, warnings


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_repository_builds_into_a_working_site(chromium, repository_site, browser):
    """The one real build: every notebook, no broken link, no console error, and screenshots
    of the index and of a chapter in build/ for a person to look at. (Without Chromium it is
    skipped before the build; the browser starts after it.)"""
    out, chapters, warnings = repository_site
    executed = [p for p in sorted((REPO / "chapters").glob("*.ipynb"))
                if not any("not executed" in w and p.name in w for w in warnings)]
    executed += sorted((REPO / "chapters" / "exercises").glob("*.ipynb"))  # the student versions
    assert [c.source for c in chapters] == [p.relative_to(REPO).as_posix() for p in executed]
    assert not [w for w in warnings if "WARNING" in w], warnings
    assert broken_links(out) == []
    assert_no_solution_is_published(out)
    server = serve(out)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    shots = REPO / "build"
    shots.mkdir(exist_ok=True)
    try:
        # Every English page, and of the Chinese edition its index, glossary and one chapter: a zh
        # chapter page holds the English one's outputs (tests/unit/test_translate.py), so the
        # browser would find the same widgets and plots there; half the pages, half the CPU.
        pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html")
                       if "_static" not in p.parts and p.relative_to(out).parts[0] != "zh")
        pages += ["zh/index.html", "zh/GLOSSARY.html", "zh/chapters/02_1_dataset_dataloader.html"]
        assert all((out / page).is_file() for page in pages)
        sidebar = []
        for page in pages:
            browser.open(f"{base}/{page}", settle=0.2)
            assert browser.errors() == [], page
            assert browser.requested_hosts() == {"127.0.0.1"}, page
            if page == "chapters/02_1_dataset_dataloader.html":
                sidebar = browser.evaluate("Array.from(document.querySelectorAll("
                                           "'.bd-sidebar-primary nav a')).map(a => a.textContent.trim())")
        titles = [c.title.replace("`", "") for c in chapters]  # the sidebar shows code as text
        assert [t for t in titles if t in sidebar] == titles
        assert any("02_2" in hit for hit in search(browser, base, "归一化"))
        assert any("04_2" in hit for hit in search(browser, base, "DistributedSampler"))
        for name, page in (("site-index.png", "index.html"),
                           ("site-chapter.png", "chapters/02_1_dataset_dataloader.html")):
            browser.open(f"{base}/{page}")
            # As a first visit: the theme restores the sidebar's scroll position of the last page.
            browser.evaluate("sessionStorage.clear(), localStorage.clear()")
            browser.open(f"{base}/{page}")
            browser.screenshot(shots / name)
            with Image.open(shots / name) as image:
                low, high = image.convert("L").getextrema()
                assert image.size == (1280, 900) and high - low > 100, name
    finally:
        server.shutdown()
        server.server_close()


def test_site_in_a_real_browser(site, browser):
    out, _, _ = site
    server = serve(out)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for page in PAGES + ["zh/index.html", "zh/chapters/01_first.html", "zh/GLOSSARY.html"]:
            browser.open(f"{base}/{page}", settle=0.2)  # as the repository's pages below
            assert browser.errors() == [], page
            assert browser.requested_hosts() == {"127.0.0.1"}, page
            sidebar = browser.evaluate("Array.from(document.querySelectorAll("
                                       "'.bd-sidebar-primary nav a')).map(a => a.textContent.trim())")
            expected = TITLES if not page.startswith("zh/") else ["第 1 章 — 第一步"]
            assert [t for t in sidebar if t in expected] == expected, page
            switch = browser.evaluate("(document.querySelector('.lang-switch a') || {}).href")
            assert switch and ("/zh/" in switch) != page.startswith("zh/"), page
        assert any("02_second" in hit for hit in search(browser, base, "quokka"))
        assert any("01_first" in hit for hit in search(browser, base, "数据管道"))
        assert any("chapters/01_first" in hit for hit in search(browser, f"{base}/zh", "数据管道"))
        assert browser.errors() == []
    finally:
        server.shutdown()
        server.server_close()


# The Chinese edition's info box: its own "**对应指南章节：**" line, in Chinese.
ZH_FIRST = ("# 第4.1章 分布式训练基础\n**对应指南章节：** 超出指南的内容（指南在 §2.3.1 处中断）；"
            "以 §2.2.1 Dataset与DataLoader类 为基础\n[术语表](../../GLOSSARY.md)\n## 本章内容\n- rank")


def test_parse_first_cell_reads_the_chinese_guide_sections_line():
    nb = nbformat.v4.new_notebook(cells=[markdown(ZH_FIRST)])
    assert parse_first_cell(nb, "zh.ipynb") == (
        "第4.1章 分布式训练基础", "超出指南的内容（指南在 §2.3.1 处中断）；以 §2.2.1 Dataset与DataLoader类 为基础")


def test_zh_chapter_takes_its_own_sections_and_its_box_is_chinese(tmp_path):
    from course.publishing.site_pages import EDITIONS, find_chapters, info_box

    (tmp_path / "chapters" / "zh").mkdir(parents=True)
    nbformat.write(executed_by_hand("Chapter 4.1", "beyond the guide (it breaks off in §2.3.1)", "x = 1"),
                   tmp_path / "chapters" / "04_1_x.ipynb")
    zh = executed_by_hand("placeholder", None, "x = 1")
    zh.cells[0].source = ZH_FIRST
    nbformat.write(zh, tmp_path / "chapters" / "zh" / "04_1_x.ipynb")
    english, _ = find_chapters(tmp_path, EDITIONS["en"])
    [chapter], _ = find_chapters(tmp_path, EDITIONS["zh"], english=english)
    assert chapter.guide_sections.startswith("超出指南的内容")
    box = info_box(ZH_FIRST, chapter, EDITIONS["zh"], twin=None)
    assert "**对应指南章节：** 超出指南的内容（指南在 §2.3.1 处中断）" in box and "**下载：**" in box
    assert "Guide sections" not in box and "beyond the guide" not in box and "Download" not in box
    assert box.count("对应指南章节") == 1  # the cell's own line moved into the box
    assert box.index("# 第4.1章") < box.index("page-info") < box.index("## 本章内容")


def test_zh_reverse_map_names_guide_headings_not_the_prose_around_them(tmp_path):
    from course.publishing.site_pages import EDITIONS, Chapter, index_page

    chapters = [Chapter("chapters/zh/02_1.ipynb", "chapters/02_1.ipynb", "第2.1章",
                        "§2.2 PyTorch中的数据加载与预处理 · §2.2.1 Dataset与DataLoader类"),
                Chapter("chapters/zh/02_3.ipynb", "chapters/02_3.ipynb", "第2.3章",
                        "§2.3.1 自定义数据集的创建，随后超出指南"),
                Chapter("chapters/zh/04_1.ipynb", "chapters/04_1.ipynb", "第4.1章", ZH_FIRST.splitlines()[1]
                        .removeprefix("**对应指南章节：** "))]
    page = index_page(chapters, EDITIONS["zh"], docs=[])
    reverse = page[page.index("## " + EDITIONS["zh"].labels["reverse"]):page.index("## 参考")]
    assert "| §2.2.1 Dataset与DataLoader类 | [02_1.ipynb](chapters/02_1.ipynb), [04_1.ipynb]" in reverse
    assert "| §2.3.1 自定义数据集的创建 | [02_3.ipynb](chapters/02_3.ipynb), [04_1.ipynb]" in reverse
    assert "为基础" not in reverse and "处中断" not in reverse


def test_every_zh_notebook_has_its_own_chinese_guide_sections():
    from course.publishing.site_pages import EDITIONS, find_chapters

    english, _ = find_chapters(REPO, EDITIONS["en"])
    chinese, _ = find_chapters(REPO, EDITIONS["zh"], english=english)
    assert chinese
    for chapter in chinese:
        _, own = parse_first_cell(nbformat.read(REPO / chapter.source, as_version=4), chapter.source)
        assert own and chapter.guide_sections == own, f"{chapter.source}: no '**对应指南章节：**' line"
        english_words = re.findall(r"\b(?:beyond|guide|builds|toward|breaks|continues|relates|like)\b", own)
        assert not english_words, f"{chapter.source}: {own!r}"
