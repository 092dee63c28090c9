"""The Chinese edition (chapters/zh/): built from the English notebooks + .po files, kept in sync."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import nbformat
import polib
import pytest

from course.assignments import exercises_of, is_student_version
from course.publishing import code_comments, translate, translate_comments
from course.publishing.translate import __main__ as translate_cli

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = REPO / "chapters"
REQUIRED = translate.required(CHAPTERS)
ZH = CHAPTERS / "zh"

CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
FENCED = re.compile(r"```.*?```", re.S)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
HTML_TAG = re.compile(r"<[^>]+>")


def _pairs(notebook: str, chapters: Path = CHAPTERS) -> list[tuple[int, str, str]]:
    """``(index, english, chinese)`` for each markdown cell of a built notebook."""
    english = nbformat.read(chapters / notebook, as_version=4)
    chinese = nbformat.read(chapters / "zh" / notebook, as_version=4)
    cells = enumerate(zip(english.cells, chinese.cells, strict=True))
    return [(i, en.source, zh.source) for i, (en, zh) in cells if en.cell_type == "markdown"]


def _prose(markdown: str) -> str:
    """Markdown without code, link targets, tags, math and §-numbers: what a reader reads as text."""
    text = FENCED.sub(" ", markdown)
    text = INLINE_CODE.sub(" ", text)
    text = LINK_TARGET.sub("]", text)
    text = HTML_TAG.sub(" ", text)
    return re.sub(r"\$[^$]*\$", " ", text)


def test_every_english_notebook_is_required_or_reported_pending(capsys):
    assert translate_cli.main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    notebooks = translate.english_notebooks(CHAPTERS)
    assert set(REQUIRED) <= set(notebooks), f"TRANSLATED lists unknown notebooks: {REQUIRED}"
    for notebook in notebooks:
        state = "required" if notebook in REQUIRED else "pending"
        assert any(line.startswith(state) and f" {notebook}:" in line for line in lines), notebook
    # No built Chinese notebook without a required English one (a renamed or deleted chapter); the
    # student versions of the exercises are built beside their instructor sources' translations.
    built = {p.relative_to(ZH).as_posix() for p in ZH.rglob("*.ipynb") if not is_student_version(p)}
    assert built == set(REQUIRED)
    students = {p.relative_to(ZH).as_posix() for p in ZH.rglob("*.ipynb") if is_student_version(p)}
    assert students == {n.replace("solutions/", "") for n in REQUIRED if n.startswith("exercises/solutions/")}
    assert not [n for n in notebooks if is_student_version(CHAPTERS / n)], "student versions are not translated"


@pytest.mark.parametrize("notebook", REQUIRED)
def test_required_notebook_is_fully_translated_and_built(notebook):
    """Every markdown cell has a non-fuzzy translation of the current English, and zh is rebuilt."""
    assert translate.check(notebook, CHAPTERS) == []


def _outputs_without_comments(cell: nbformat.NotebookNode) -> list:
    """A cell's outputs, with the comments of the diffs a following cell shows stripped."""
    outputs = copy.deepcopy(cell.outputs)
    for output in outputs if translate_comments.follows(cell) else ():
        if "text" in output:
            output.text = translate_comments.strip_output(output.text)
        data = output.get("data", {})
        if "text/plain" in data:
            data["text/plain"] = translate_comments.strip_output(data["text/plain"])
        if "text/html" in data:
            data["text/html"] = translate_comments.strip_html(data["text/html"])
    return outputs


@pytest.mark.parametrize("notebook", REQUIRED)
def test_code_cells_differ_from_the_english_only_in_comments(notebook):
    """Code equal once comments and docstrings are stripped (tokenize); outputs equal, except that
    those of a cell showing a diff of the notebook's script follow its comments."""
    english = nbformat.read(CHAPTERS / notebook, as_version=4)
    chinese = nbformat.read(ZH / notebook, as_version=4)
    assert [c.cell_type for c in chinese.cells] == [c.cell_type for c in english.cells]
    for index, (en, zh) in enumerate(zip(english.cells, chinese.cells, strict=True)):
        where = f"{notebook} cell #{index}"
        if en.cell_type == "code":
            assert code_comments.strip(zh.source) == code_comments.strip(en.source), where
            assert (zh.execution_count, zh.metadata) == (en.execution_count, en.metadata), where
            if translate_comments.follows(en):
                assert _outputs_without_comments(zh) == _outputs_without_comments(en), where
            else:
                assert zh.outputs == en.outputs, where
        else:
            assert zh.source != en.source or not LATIN_WORD.search(_prose(en.source)), \
                f"{notebook} cell #{index} is still the English"


@pytest.mark.parametrize("notebook", REQUIRED)
def test_a_chapters_scripts_differ_from_the_english_only_in_comments_and_read_as_chinese(notebook):
    """The zh notebook runs and shows chapters/zh/scripts/NN/: the English scripts with Chinese comments."""
    for name, english in translate.scripts_of(notebook, CHAPTERS).items():
        chinese = (ZH / name).read_text(encoding="utf-8")
        assert code_comments.strip(chinese) == code_comments.strip(english), f"chapters/zh/{name}"
        left = [c.text for c in code_comments.comments(chinese) if LATIN_WORD.search(c.text)
                and len(LATIN_WORD.findall(c.text)) >= 4 and not CJK.search(c.text)]
        assert not left, f"chapters/zh/{name}: comments still English: {left[:3]}"


def test_a_shown_script_is_read_as_a_file_and_a_diff_as_a_diff():
    file_output = "# scripts/04_1/single.py\nimport os  # the standard library\n\"\"\"A docstring.\"\"\"\n"
    diff_output = "# single.py -> ddp.py\n--- single.py\n+++ ddp.py\n@@ -1 +1 @@\n-x = 1  # one\n+x = 2  # two\n"
    assert [c.text for c in translate_comments.output_comments(file_output)] == ["the standard library"]
    assert [c.text for c in translate_comments.output_comments(diff_output)] == ["one", "two"]


@pytest.mark.parametrize("notebook", REQUIRED)
def test_each_cell_reads_as_chinese(notebook):
    """No English paragraph left: a cell's prose (without code and identifiers) is mostly CJK."""
    for index, english, chinese in _pairs(notebook):
        words = LATIN_WORD.findall(_prose(english))
        if len(words) < 4:  # a heading such as "## `collate_fn`" may stay as it is
            continue
        prose = _prose(chinese)
        cjk = len(CJK.findall(prose))
        latin = sum(len(w) for w in LATIN_WORD.findall(prose))
        assert cjk >= 0.5 * latin and cjk >= 4, \
            f"{notebook} cell #{index}: {cjk} CJK vs {latin} Latin letters: {chinese[:80]!r}"


@pytest.mark.parametrize("notebook", REQUIRED)
def test_guide_text_code_and_links_are_kept(notebook):
    """The guide's Chinese, the code, the §-numbers and the link targets survive translation."""
    for index, english, chinese in _pairs(notebook):
        where = f"{notebook} cell #{index}"
        for run in re.findall(r"[\u3400-\u9fff][\u3400-\u9fff0-9A-Za-z·、，。：（）《》“”]*", english):
            assert run in chinese, f"{where}: the guide's {run!r} is not kept verbatim"
        for block in FENCED.findall(english):
            assert block in chinese, f"{where}: code block changed: {block[:60]!r}"
        assert sorted(re.findall(r"§\d+(?:\.\d+)*", english)) == sorted(
            re.findall(r"§\d+(?:\.\d+)*", chinese)), f"{where}: section numbers differ"
        # a path may name the Chinese edition's own copy (chapters/zh/...) where the English names its own
        kept = {code.replace("chapters/zh/", "chapters/") for code in INLINE_CODE.findall(chinese)}
        missing = set(INLINE_CODE.findall(english)) - kept
        assert not missing, f"{where}: inline code dropped or changed: {sorted(missing)}"
        for target in LINK_TARGET.findall(chinese):
            if not re.match(r"[a-z]+:|#", target):
                path = (ZH / notebook).parent / target.split("#")[0]
                assert path.exists(), f"{where}: link {target} does not resolve from chapters/zh"


def glossary() -> list[dict[str, str]]:
    """The glossary's table rows as ``{column: text}`` (columns by their header)."""
    rows, header = [], None
    for line in (REPO / "GLOSSARY.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            rows.append(dict(zip(header, cells, strict=False)))
    return rows


def _variants(term: str) -> list[str]:
    return [t.strip() for t in re.split(r"\s*/\s*", term) if t.strip()]


def _chinese_term(variant: str) -> tuple[str, str]:
    """``(term, gloss)`` of a 中文 variant: "rank（进程序号）" is ("rank", "进程序号").

    Only an English term kept in the Chinese text has a gloss; "分片（模型）" names a sense.
    """
    kept = re.fullmatch(r"([A-Za-z][A-Za-z ]*)（([^）]+)）", variant)
    return (kept[1], kept[2]) if kept else (variant, "")


def senses() -> dict[str, list[list[str]]]:
    """Each distinctive English name -> the Chinese terms of each sense the glossary gives it.

    A row whose English and Chinese list as many variants pairs them one to one ("rotation /
    scaling / cropping" <-> "旋转 / 缩放 / 裁剪"); otherwise every variant may be any of its
    Chinese ones. A name on several rows ("scaling" of an image, "scaling" of throughput) has
    several senses, and a cell may use the Chinese of any one of them.
    """
    found: dict[str, list[list[str]]] = {}
    for row in glossary():
        english = _variants(re.sub(r"\s+", " ", re.sub(r"\([^)]*\)", "", row["English"])).strip())
        chinese = [_chinese_term(v)[0] for v in _variants(row["中文"])]
        paired = len(english) == len(chinese)
        for i, name in enumerate(english):
            if len(name) > 5:  # short names ("rank", "shard") match too much English
                found.setdefault(name.lower(), []).append([chinese[i]] if paired else chinese)
    return found


def glossed_terms() -> dict[str, str]:
    """The English terms the Chinese keeps, with the gloss their first use carries."""
    return {term: gloss for row in glossary() for term, gloss in map(_chinese_term, _variants(row["中文"]))
            if gloss}


def _english_prose(english: str) -> str:
    # Without the English glosses of the guide's headings: "§1.2 PyTorch的框架和特点 (... features)".
    return re.sub(r"(?<=[\u3400-\u9fff]) \([^)]*\)", "", _prose(english)).lower()


def glossary_problems(pairs: list[tuple[int, str, str]], where: str) -> list[str]:
    """Cells whose English uses a glossary name and whose Chinese has none of its senses' terms."""
    problems = []
    table = senses()
    for index, english, chinese in pairs:
        prose = _english_prose(english)
        for name, options in table.items():
            if re.search(rf"\b{re.escape(name)}(s|es)?\b", prose) and \
                    not any(t in chinese for terms in options for t in terms):
                problems.append(f"{where} cell #{index} says {name!r}; the glossary's "
                                f"{' or '.join('/'.join(t) for t in options)} is not in the Chinese")
    return problems


def gloss_problems(pairs: list[tuple[int, str, str]], where: str) -> list[str]:
    """A kept English term (rank, world size) must carry its gloss in the first cell using it."""
    problems = []
    for term, gloss in glossed_terms().items():
        pattern = rf"(?<![\w-]){re.escape(term)}(?![\w-])"
        first = next(((i, zh) for i, _, zh in pairs if re.search(pattern, _prose(zh))), None)
        if first and not re.search(rf"{re.escape(term)}\**（{re.escape(gloss)}）", first[1]):
            problems.append(f"{where} cell #{first[0]} is the first to say {term!r}: "
                            f"write {term}（{gloss}） there")
    return problems


@pytest.mark.parametrize("notebook", REQUIRED)
def test_glossary_terms_are_the_ones_used(notebook):
    """Where an English cell uses a glossary term, the zh cell uses the glossary's 中文 for it."""
    assert glossary_problems(_pairs(notebook), notebook) == []


@pytest.mark.parametrize("notebook", REQUIRED)
def test_kept_english_terms_are_glossed_at_first_use(notebook):
    assert gloss_problems(_pairs(notebook), notebook) == []


def test_each_english_sense_has_its_own_chinese_term():
    table = senses()
    assert table["rotation"] == [["旋转"]] and table["weak scaling"] == [["弱扩展"]]
    assert sorted(table["scaling"]) == [["扩展"], ["缩放"]]  # of throughput, of an image
    assert {"rank": "进程序号", "local rank": "本地进程序号", "world size": "进程总数",
            "rendezvous": "会合"}.items() <= glossed_terms().items()
    ok = [(1, "Random scaling and flipping.", "随机缩放和翻转。"),
          (2, "How throughput scaling changes.", "吞吐量的扩展情况如何变化。")]
    assert glossary_problems(ok, "nb") == []
    wrong = [(3, "Weak scaling keeps the per-rank batch.", "弱缩放保持每个 rank 的批次不变。"),
             (4, "Rotation helps.", "缩放有用。")]
    problems = glossary_problems(wrong, "nb")
    assert any("cell #3" in p and "弱扩展" in p for p in problems), problems
    assert any("cell #4" in p and "旋转" in p for p in problems), problems


def test_glossary_check_fails_on_a_copy_without_the_term(tmp_path):
    """On a temporary copy: drop the glossary's Chinese from one cell and the checks name it."""
    notebook = "06_2_distributed_checkpoints.ipynb"
    chapters = _copy_of(tmp_path, notebook)
    po = polib.pofile(str(translate.po_path(notebook, chapters)), wrapwidth=0)
    for entry in po:  # rank without its gloss, and one cell without "world size"
        entry.msgstr = entry.msgstr.replace("rank（进程序号）", "rank")
    entry = next(e for e in po if "world size" in e.msgstr
                 and not translate_comments.is_comment_context(e.msgctxt))
    entry.msgstr = entry.msgstr.replace("world size（进程总数）", "进程数").replace("world size", "进程数")
    index = int(entry.msgctxt.rsplit("#", 1)[1])
    po.save()
    assert translate_cli.main(["build", "--chapters", str(chapters)]) == 0
    pairs = _pairs(notebook, chapters)
    assert [p for p in glossary_problems(pairs, notebook) if f"cell #{index} " in p and "world size" in p]
    assert [p for p in gloss_problems(pairs, notebook) if "'rank'" in p]


def _copy_of(tmp_path: Path, notebook: str) -> Path:
    chapters = tmp_path / "chapters"
    (chapters / "zh" / "po").mkdir(parents=True)
    (chapters / notebook).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(CHAPTERS / notebook, chapters / notebook)
    shutil.copy(translate.po_path(notebook, CHAPTERS), translate.po_path(notebook, chapters))
    (chapters / "zh" / "TRANSLATED").write_text(notebook + "\n")
    assert translate_cli.main(["build", "--chapters", str(chapters)]) == 0
    return chapters


def test_a_changed_or_new_english_cell_fails_naming_notebook_and_cell(tmp_path, capsys):
    notebook = REQUIRED[0]
    chapters = _copy_of(tmp_path, notebook)
    nb = nbformat.read(chapters / notebook, as_version=4)
    changed = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and i > 0)
    nb.cells[changed].source += "\nOne more English sentence."
    nb.cells.insert(changed + 1, nbformat.v4.new_markdown_cell("A brand-new English paragraph."))
    nbformat.write(nb, chapters / notebook)

    before_extract = " ".join(translate.check(notebook, chapters))
    assert f"{notebook} cell #{changed} " in before_extract and "English changed" in before_extract

    assert translate_cli.main(["extract", "--chapters", str(chapters)]) == 0
    assert translate_cli.main(["check", "--chapters", str(chapters)]) == 1
    err = capsys.readouterr().err
    assert f"{notebook} cell #{changed} " in err and "fuzzy" in err
    assert f"{notebook} cell #{changed + 1} " in err and "not translated" in err

    po = polib.pofile(str(translate.po_path(notebook, chapters)))
    for entry in po:
        if entry.msgctxt in (translate.context(notebook, changed),
                             translate.context(notebook, changed + 1)):
            entry.msgstr, entry.flags = "新的中文译文，补上了这一段。", []
    po.save()
    assert translate_cli.main(["build", "--chapters", str(chapters)]) == 0
    assert translate.check(notebook, chapters) == []


def test_extract_keeps_translations_of_moved_cells(tmp_path):
    notebook = REQUIRED[0]
    chapters = _copy_of(tmp_path, notebook)
    nb = nbformat.read(chapters / notebook, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("x = 1"))
    nbformat.write(nb, chapters / notebook)
    assert translate_cli.main(["extract", "--chapters", str(chapters)]) == 0
    problems = translate.problems_of(notebook, nb, translate.load_po(notebook, chapters))
    assert problems == []  # every cell moved by one index and kept its translation


def test_zh_exercises_have_the_english_exercises_and_points():
    for notebook in (n for n in REQUIRED if n.startswith("exercises/")):
        english = exercises_of(nbformat.read(CHAPTERS / notebook, as_version=4), name=notebook)
        chinese = exercises_of(nbformat.read(ZH / notebook, as_version=4), name=notebook)
        assert [(e.key, e.points) for e in chinese] == [(e.key, e.points) for e in english]


def test_readmes_link_each_other_and_troubleshooting_keeps_the_errors():
    assert "README.zh-CN.md" in (REPO / "README.md").read_text().split("\n## ")[0]
    assert "README.md" in (REPO / "README.zh-CN.md").read_text().split("\n## ")[0]
    english = (REPO / "TROUBLESHOOTING.md").read_text()
    chinese = (REPO / "TROUBLESHOOTING.zh-CN.md").read_text()
    for block in FENCED.findall(english):  # the messages people paste into a search engine
        assert block in chinese, f"TROUBLESHOOTING.zh-CN.md lacks {block[:70]!r}"
    missing = set(INLINE_CODE.findall(english)) - set(INLINE_CODE.findall(chinese))
    assert not missing, f"TROUBLESHOOTING.zh-CN.md lacks {sorted(missing)}"
    headings = [h for h in re.findall(r"^## .*", english, re.M)]
    assert len(re.findall(r"^## .*", chinese, re.M)) == len(headings)
    assert len(CJK.findall(_prose(chinese))) > 2000


def test_student_versions_of_the_zh_exercises_match_the_english(tmp_path):
    """`python -m course.assignments build --sources chapters/zh/exercises/solutions` hands out the same work."""
    from course.assignments import build, instructor_sources

    english = build(tmp_path / "en", instructor_sources(CHAPTERS / "exercises" / "solutions"))
    chinese = build(tmp_path / "zh", instructor_sources(ZH / "exercises" / "solutions"))
    assert chinese == {stem: english[stem] for stem in chinese}
    assert {f"exercises/solutions/{stem}.ipynb" for stem in chinese} == {
        n for n in REQUIRED if n.startswith("exercises/")}
    for stem in chinese:
        en = nbformat.read(tmp_path / "en" / f"{stem}.ipynb", as_version=4)
        zh = nbformat.read(tmp_path / "zh" / f"{stem}.ipynb", as_version=4)
        assert [code_comments.strip(c.source) for c in zh.cells if c.cell_type == "code"] == [
            code_comments.strip(c.source) for c in en.cells if c.cell_type == "code"]


def test_a_student_version_is_refused_for_translation_naming_its_instructor_source(capsys):
    """The exercises are translated from their instructor sources; the Chinese student versions are
    built from those translations (and checked: `translate check`), never translated themselves."""
    with pytest.raises(SystemExit) as refused:
        translate_cli.main(["check", "--notebooks", "exercises/ex01_pytorch_basics.ipynb"])
    assert refused.value.code == 2
    assert "exercises/solutions/ex01_pytorch_basics.ipynb" in capsys.readouterr().err
    assert translate.zh_student_version("exercises/solutions/ex01_pytorch_basics.ipynb") == \
        ZH / "exercises" / "ex01_pytorch_basics.ipynb"
    assert translate.zh_student_version("01_pytorch_basics.ipynb") is None
