"""Tests for course/site.py: a site built from tiny notebooks, then opened in a real browser."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import threading
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from PIL import Image

from course.site import (
    MARKER,
    build_site,
    freeze_widgets,
    main,
    parse_first_cell,
    rewrite_links,
)

REPO = Path(__file__).resolve().parents[1]
FIRST = "# Chapter 1 — First steps\n**Guide sections:** §2.1.1 数据管道定义 · §1.1 深度学习的基本概念\n"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--hide-scrollbars", "--window-size=1200,1600"]


def markdown(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(text)


def executed_by_hand(title: str, sections: str | None, code: str) -> nbformat.NotebookNode:
    """A notebook that looks executed (count 1, a stream output) without starting a kernel."""
    head = f"# {title}\n" + (f"**Guide sections:** {sections}\n" if sections else "")
    cell = nbformat.v4.new_code_cell(code, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hello\n")]
    return nbformat.v4.new_notebook(cells=[markdown(head), cell])


def first_chapter() -> nbformat.NotebookNode:
    """Chapter 1, executed for real: a tqdm bar (a widget), a printed value and a plot."""
    nb = nbformat.v4.new_notebook(cells=[
        markdown(FIRST + "[Glossary / 术语表](../GLOSSARY.md)\n## What you will learn\n- a plot"),
        markdown("See [the next chapter](02_second.ipynb#Summary), [the loader code]"
                 "(../common/fake.py) and [PyTorch](https://pytorch.org)."),
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
    (root / "common").mkdir()
    (root / "common" / "fake.py").write_text("LOADER = 'code'\n")
    nbformat.write(first_chapter(), root / "chapters" / "01_first.ipynb")
    nbformat.write(executed_by_hand("Chapter 2 — Second", "beyond the guide (continues §2.3.1 "
                                    "自定义数据集的创建)", "print('hello')"),
                   root / "chapters" / "02_second.ipynb")
    draft = executed_by_hand("Chapter 3 — Draft", "§2.2.2 数据增强与归一化", "x = 1")
    draft.cells[1].execution_count = None
    nbformat.write(draft, root / "chapters" / "03_draft.ipynb")
    nbformat.write(executed_by_hand("Exercises 1", "§2.1.1 数据管道定义", "print('hello')"),
                   root / "chapters" / "exercises" / "01_ex.ipynb")
    (root / "GLOSSARY.md").write_text("# Glossary\n\n| 中文 | English |\n|---|---|\n"
                                      "| 数据管道 | data pipeline ([ch. 1](chapters/01_first.ipynb)) |\n")
    (root / "TROUBLESHOOTING.md").write_text("# Troubleshooting\n\nSee the [glossary](GLOSSARY.md).\n")
    return root


@pytest.fixture(scope="module")
def site(tiny_repo, tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "html"
    chapters, warnings = build_site(tiny_repo, out)
    return out, chapters, warnings


class Links(HTMLParser):
    """Every href/src in a page, plus the text of its h1 headings."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.h1: list[str] = []
        self._in_h1 = False

    def handle_starttag(self, tag, attrs):
        self.links += [value for name, value in attrs if name in ("href", "src") and value]
        self._in_h1 = self._in_h1 or tag == "h1"

    def handle_endtag(self, tag):
        self._in_h1 = self._in_h1 and tag != "h1"

    def handle_data(self, data):
        if self._in_h1 and data.strip() not in ("", "¶"):
            self.h1.append(data.strip())


def parse(page: Path) -> Links:
    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_parse_first_cell():
    nb = executed_by_hand("Chapter 9 — Nine", "§2.2.1 Dataset与DataLoader类", "x = 1")
    assert parse_first_cell(nb, "nine.ipynb") == ("Chapter 9 — Nine", "§2.2.1 Dataset与DataLoader类")
    assert parse_first_cell(executed_by_hand("Untitled", None, "x"), "u.ipynb") == ("Untitled", "")
    nb.cells[0].source = "Some text, no title"
    with pytest.raises(ValueError, match="nine.ipynb"):
        parse_first_cell(nb, "nine.ipynb")


def test_pages_written_and_unexecuted_notebook_reported(site):
    out, chapters, warnings = site
    assert [c.page for c in chapters] == ["01_first.html", "02_second.html", "exercises/01_ex.html"]
    for page in ("index.html", "glossary.html", "troubleshooting.html", *[c.page for c in chapters]):
        assert (out / page).is_file(), page
    assert not (out / "03_draft.html").exists()
    assert warnings == ["chapters/03_draft.ipynb: not executed (run `python -m course.notebooks "
                        "build` on it)"]


def test_landing_page_has_the_chapter_map_both_ways(site):
    out, _, _ = site
    text = (out / "index.html").read_text(encoding="utf-8")
    links = parse(out / "index.html").links
    for page in ("01_first.html", "02_second.html", "exercises/01_ex.html", "glossary.html",
                 "troubleshooting.html"):
        assert page in links
    assert "Chapter 1 — First steps" in text and "beyond the guide (continues §2.3.1" in text
    reverse = text[text.index("Guide sections → notebooks"):]
    assert reverse.index("§1.1 深度学习的基本概念") < reverse.index("§2.1.1 数据管道定义")
    assert reverse.index("Exercises") > reverse.index("01_ex.ipynb")


def test_prev_next_navigation(site):
    out, _, _ = site
    first, second = parse(out / "01_first.html").links, parse(out / "02_second.html").links
    exercise = parse(out / "exercises" / "01_ex.html").links
    assert "02_second.html" in first and "index.html" in first
    assert "01_first.html" in second and "exercises/01_ex.html" in second
    assert "../02_second.html" in exercise and "../index.html" in exercise
    assert "Previous" not in (out / "01_first.html").read_text(encoding="utf-8")
    assert "Next:" not in (out / "exercises" / "01_ex.html").read_text(encoding="utf-8")


def test_every_local_link_resolves(site):
    out, _, _ = site
    for page in out.rglob("*.html"):
        for link in parse(page).links:
            if link.startswith(("#", "data:", "http://", "https://")):
                continue
            target = (page.parent / link.split("#")[0]).resolve()
            assert target.is_file(), f"{page.name}: {link}"


def test_links_point_at_pages_and_copied_files(site):
    out, _, _ = site
    links = parse(out / "01_first.html").links
    assert "glossary.html" in links and "02_second.html#Summary" in links
    assert "_files/common/fake.py" in links and "https://pytorch.org" in links
    assert (out / "_files" / "common" / "fake.py").read_text() == "LOADER = 'code'\n"
    assert "01_first.html" in parse(out / "glossary.html").links
    assert "glossary.html" in parse(out / "troubleshooting.html").links


def test_chapter_page_is_offline_with_plot_and_frozen_progress_bar(site):
    out, _, _ = site
    text = (out / "01_first.html").read_text(encoding="utf-8")
    assert re.search(r'<img[^>]+src="data:image/png;base64,', text)
    assert "sum of squares 55" in text
    assert re.search(r"steps: 100%\|█+\| 5/5", text)
    assert "widget-view+json" not in text
    for page in out.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', html), page.name


def test_rewrite_links_turns_dead_links_into_text(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "09_draft.ipynb").write_text("{}")
    warnings: list[str] = []
    files: set[str] = set()
    text = ("[a](missing.ipynb) [b](#local) [c](mailto:x@y.z) [d](../GLOSSARY.md#data) "
            "![img](figs/p.png) [draft](09_draft.ipynb)")
    new = rewrite_links(text, source="chapters/01.ipynb", page="01.html",
                        pages={"GLOSSARY.md": "glossary.html"}, root=tmp_path, files=files,
                        warnings=warnings)
    assert new == "a [b](#local) [c](mailto:x@y.z) [d](glossary.html#data) img draft"
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


def test_output_folder_is_rebuilt_but_a_foreign_one_is_refused(tiny_repo, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="foreign"):
        build_site(tiny_repo, foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
    out = tmp_path / "html"
    build_site(tiny_repo, out, with_exercises=False)
    (out / "stale.html").write_text("old")
    build_site(tiny_repo, out, with_exercises=False)
    assert (out / MARKER).is_file() and not (out / "stale.html").exists()
    assert not (out / "exercises").exists()


def test_command_line(tiny_repo, tmp_path, capsys):
    assert main(["--root", str(tiny_repo), "--out", str(tmp_path / "html"), "--no-exercises"]) == 0
    captured = capsys.readouterr()
    assert "Site: " in captured.out and "02_second.html" in captured.out
    assert "03_draft.ipynb: not executed" in captured.err


def test_the_repository_builds_into_a_site(tmp_path):
    chapters, warnings = build_site(REPO, tmp_path / "html")
    executed = [p for p in sorted((REPO / "chapters").glob("*.ipynb"))
                + sorted((REPO / "chapters" / "exercises").glob("*.ipynb"))
                if not any("not executed" in w and p.name in w for w in warnings)]
    assert [c.source for c in chapters] == [p.relative_to(REPO).as_posix() for p in executed]
    landing = parse(tmp_path / "html" / "index.html").links
    for chapter in chapters:
        assert (tmp_path / "html" / chapter.page).is_file() and chapter.page in landing
    assert (tmp_path / "html" / "glossary.html").is_file()
    assert (tmp_path / "html" / "troubleshooting.html").is_file()


def test_docs_link_only_to_files_that_exist():
    for doc in ("GLOSSARY.md", "TROUBLESHOOTING.md"):
        text = (REPO / doc).read_text(encoding="utf-8")
        targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s#][^)\s]*)\)", text)
                   if not re.match(r"[a-z]+:", t)}
        missing = sorted(t for t in targets if not (REPO / t).is_file())
        assert not missing, f"{doc} links to files that do not exist: {missing}"


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture
def served(site):
    """The built site on http://127.0.0.1:<free port>/ for the duration of one test."""
    out, _, _ = site
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=True)


def test_site_in_a_real_browser(served, tmp_path):
    browser = find_chromium()
    if browser is None:
        pytest.skip("Chromium not found: the browser test needs it. Install it with "
                    "`make system-deps` (Debian/Ubuntu: sudo apt-get install -y chromium)")
    shots = REPO / "build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    landing = chromium(browser, tmp_path / "p1", "--dump-dom", f"{served}/index.html").stdout
    assert "Chapter map" in landing and 'href="01_first.html"' in landing
    chapter = chromium(browser, tmp_path / "p2", "--dump-dom", f"{served}/01_first.html").stdout
    assert re.search(r"<h1[^>]*>Chapter 1 — First steps", chapter)
    assert "jp-CodeCell" in chapter and "plt.title" in re.sub(r"<[^>]+>", "", chapter)
    assert re.search(r'<img[^>]+src="data:image/png;base64,', chapter)
    for name, page in (("site-landing.png", "index.html"), ("site-chapter.png", "01_first.html")):
        chromium(browser, tmp_path / name, f"--screenshot={shots / name}", f"{served}/{page}")
        with Image.open(shots / name) as image:
            low, high = image.convert("L").getextrema()
            assert image.size == (1200, 1600) and high - low > 100, name
