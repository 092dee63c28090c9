"""Code comments of the Chinese edition: found with tokenize, translated in place, checked."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import polib

from course.assignments import NOT_DONE
from course.publishing import code_comments, translate, translate_comments
from course.publishing.translate import __main__ as translate_cli

REPO = Path(__file__).resolve().parents[2]
CELL = '''# Build the table
# from the rows.
label = "a # not a comment"  # trailing one
width = 2      # aligned  # noqa: E501
# NBVAL_CHECK_OUTPUT
### BEGIN SOLUTION
def f(x):
    """Twice ``x``.

    Used below.
    """
    # inside a function
    return 2 * x
'''


def test_comments_are_found_by_tokenize_and_markers_left_alone():
    found = code_comments.comments(CELL)
    assert [(c.kind, c.text) for c in found] == [
        ("block", "Build the table\nfrom the rows."), ("trailing", "trailing one"),
        ("trailing", "aligned"), ("docstring", "Twice ``x``.\n\nUsed below."),
        ("block", "inside a function")]
    stripped = code_comments.strip(CELL)
    assert '"a # not a comment"' in stripped and "# noqa: E501" in stripped
    assert "# NBVAL_CHECK_OUTPUT" in stripped and "### BEGIN SOLUTION" in stripped
    assert "Build" not in stripped and "trailing" not in stripped and "Twice" not in stripped


def test_rewrite_keeps_indentation_alignment_and_code():
    chinese = {"Build the table\nfrom the rows.": "由各行\n建表。", "trailing one": "行尾注释",
               "aligned": "对齐", "Twice ``x``.\n\nUsed below.": "``x`` 的两倍。\n\n下面会用到。",
               "inside a function": "函数内部\n第二行"}
    zh = code_comments.rewrite(CELL, lambda c: chinese[c.text])
    assert zh.startswith("# 由各行\n# 建表。\n")
    assert 'label = "a # not a comment"  # 行尾注释\n' in zh
    assert "width = 2      # 对齐  # noqa: E501\n" in zh  # the comment starts where it did
    assert '    """``x`` 的两倍。\n\n    下面会用到。\n    """\n' in zh
    assert "    # 函数内部\n    # 第二行\n    return 2 * x\n" in zh
    assert code_comments.strip(zh) == code_comments.strip(CELL)
    compile(zh, "zh", "exec")


def test_cells_that_are_not_python_and_magics():
    assert code_comments.comments("%%bash\necho hi  # a shell comment\n") == []
    script = "%%writefile run.py\nimport os  # the module\n!ls  # a shell line\n"
    assert [c.text for c in code_comments.comments(script)] == ["the module"]
    assert code_comments.comments("# 中文注释\nx = 1  # x\n# 0.5\n") == []  # nothing to translate
    assert code_comments.comments("x = (1,\n") == []  # tokenize fails: left as it is


def test_bad_translations_are_refused():
    trailing, docstring = code_comments.comments('def f():\n    "One."\n    return 1  # one\n')[::-1]
    assert "one line" in code_comments.format_problem(trailing, "两\n行")
    assert "no \"" in code_comments.format_problem(docstring, 'a "quote"')
    source = 'def f():\n    "One."\n'
    assert code_comments.rewrite(source, lambda c: "两\n行") == source  # refused: kept English


SCRIPT = '"""Train on N ranks.\n\n    torchrun --nproc_per_node=N train.py --out DIR\n"""\n\nimport os  # the OS\n'


def test_a_scripts_module_docstring_is_translated_keeping_its_margin():
    """A work file's or a chapter script's usage docstring: its usage line keeps its indent, the closing quotes
    their column; a docstring may quote JSON as long as its translation neither holds nor touches the \"\"\"."""
    docstring, trailing = code_comments.comments(SCRIPT)
    assert (docstring.kind, docstring.text) == ("docstring", "Train on N ranks.\n\ntorchrun --nproc_per_node=N train.py --out DIR")
    chinese = {docstring.text: "在 N 个 rank 上训练。\n\ntorchrun --nproc_per_node=N train.py --out DIR",
               trailing.text: "操作系统"}
    zh = code_comments.rewrite(SCRIPT, lambda c: chinese[c.text])
    assert zh == '"""在 N 个 rank 上训练。\n\n    torchrun --nproc_per_node=N train.py --out DIR\n"""\n\nimport os  # 操作系统\n'
    assert code_comments.strip(zh) == code_comments.strip(SCRIPT)
    assert code_comments.format_problem(docstring, '写 {"event": "done"}。') == ""
    for bad in ('末尾是 "x"', '"x" 开头', '三个 """ 引号', "反斜杠 \\n"):
        assert code_comments.format_problem(docstring, bad), bad


def test_a_shown_files_html_follows_a_docstring_of_several_lines():
    old, new = '"""One.\n\n    usage\n"""', '"""一。\n\n    用法\n"""'
    span = '<span style="color: #BA2121">'
    html = f'<pre>{span}"""One.</span>\n\n{span}    usage</span>\n{span}"""</span>\n<span>import</span>'
    table = translate_comments.HTML_ESCAPES[1]
    assert translate_comments.html_replace(html, old, new, table) == (
        f'<pre>{span}"""一。</span>\n{span}</span>\n{span}    用法</span>\n{span}"""</span>\n<span>import</span>')
    assert translate_comments.html_replace(html, '"""Two."""', '"""二。"""', table) == html


def test_a_diff_output_follows_the_comments():
    text = '# a -> b\n--- a\n+++ b\n@@ -1 +1,2 @@\n x = f(1,  # first\n+y = "#"  # second\n'
    found = translate_comments.output_comments(text)
    assert [c.text for c in found] == ["first", "second"]
    html = '<span>+y = &quot;#&quot;  # second</span>'
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "show_diff(a, b)  # second",
        outputs=[nbformat.v4.new_output("execute_result", {"text/plain": text, "text/html": html},
                                        execution_count=1)])])
    po = polib.POFile()
    for msgid, msgstr in (("first", "第一"), ("second", "第二")):
        po.append(polib.POEntry(msgctxt="nb.ipynb#comment", msgid=msgid, msgstr=msgstr))
    zh = translate_comments.build_code_cells("nb.ipynb", notebook, po).cells[0]
    assert zh.source == "show_diff(a, b)  # 第二"
    data = zh.outputs[0].data
    assert data["text/plain"] == text.replace("# first", "# 第一").replace("# second", "# 第二")
    assert data["text/html"] == '<span>+y = &quot;#&quot;  # 第二</span>'
    assert translate_comments.strip_output(data["text/plain"]) == translate_comments.strip_output(text)


def test_check_fails_on_an_untranslated_comment_and_the_english_stays(tmp_path, capsys):
    notebook = "01_pytorch_basics.ipynb"
    chapters = tmp_path / "chapters"
    (chapters / "zh" / "po").mkdir(parents=True)
    shutil.copy(REPO / "chapters" / notebook, chapters / notebook)
    shutil.copy(translate.po_path(notebook, REPO / "chapters"), translate.po_path(notebook, chapters))
    (chapters / "zh" / "TRANSLATED").write_text(notebook + "\n")
    po = polib.pofile(str(translate.po_path(notebook, chapters)), wrapwidth=0)
    entry = next(e for e in po if e.msgctxt == f"{notebook}#comment")
    english, entry.msgstr = entry.msgid, ""
    po.save()
    assert translate_cli.main(["build", "--chapters", str(chapters)]) == 1
    err = capsys.readouterr().err
    assert f"{notebook} cell #2 block comment" in err and "not translated yet" in err
    zh = nbformat.read(chapters / "zh" / notebook, as_version=4)
    assert any(f"# {english}" in c.source for c in zh.cells if c.cell_type == "code")

    nb = nbformat.read(chapters / notebook, as_version=4)  # a new comment: extract adds its entry
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.source += "\n# A brand-new comment."
    nbformat.write(nb, chapters / notebook)
    assert any("new since the last extract" in p for p in translate.check(notebook, chapters))
    assert translate_cli.main(["extract", "--chapters", str(chapters)]) == 0
    po = polib.pofile(str(translate.po_path(notebook, chapters)), wrapwidth=0)
    added = [e for e in po if e.msgid == "A brand-new comment."]
    assert [(e.msgctxt, e.msgstr) for e in added] == [(f"{notebook}#comment", "")]


def test_every_notebook_cell_still_compiles_with_any_translation():
    """Rewriting every comment of every English code cell (multi-line blocks and docstrings
    included) keeps the code: the same once stripped, and still valid Python."""
    notebooks = sorted((REPO / "chapters").glob("*.ipynb")) + sorted(
        (REPO / "chapters" / "exercises" / "solutions").glob("*.ipynb"))
    rewritten = 0
    for path in notebooks:
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type != "code" or not code_comments.comments(cell.source):
                continue
            zh = code_comments.rewrite(
                cell.source, lambda c: "译文" if c.kind == "trailing" else "译文一\n\n译文二")
            assert zh != cell.source and code_comments.strip(zh) == code_comments.strip(cell.source)
            compile(code_comments.python_part(zh)[1], f"{path.name} cell #{index}", "exec")
            rewritten += 1
    assert rewritten > 50


def test_an_exercises_work_files_are_translated_and_handed_out(tmp_path, capsys):
    """``build`` writes the Chinese work files (exNN_work/) beside the Chinese instructor source and hands them
    out beside its student version; ``check`` fails on a handed-out file that is not what build writes."""
    notebook = "exercises/solutions/ex04_distributed_training.ipynb"
    chapters = tmp_path / "chapters"
    (chapters / "zh" / "po").mkdir(parents=True)
    shutil.copytree(REPO / "chapters" / "exercises" / "solutions" / "ex04_work",
                    chapters / "exercises" / "solutions" / "ex04_work")
    shutil.copy(REPO / "chapters" / notebook, chapters / notebook)
    shutil.copy(translate.po_path(notebook, REPO / "chapters"), translate.po_path(notebook, chapters))
    (chapters / "zh" / "TRANSLATED").write_text(notebook + "\n")
    assert translate_cli.main(["build", "--chapters", str(chapters)]) == 0, capsys.readouterr().err
    solution = (chapters / "zh" / "exercises" / "solutions" / "ex04_work" / "broken_ddp.py").read_text()
    assert solution.startswith('"""一个有三个错误的 DDP 训练脚本。')
    handed = chapters / "zh" / "exercises" / "ex04_work" / "fixed_ddp.py"
    assert handed.read_text() == NOT_DONE + solution  # the answer file: the broken script, its first line raising
    handed.write_text(NOT_DONE + (chapters / "exercises" / "solutions" / "ex04_work" / "broken_ddp.py").read_text())
    assert any("handed-out chapters/zh/exercises/ex04_work/fixed_ddp.py" in p for p in translate.check(notebook, chapters))
