"""The Chinese edition's style guard: one word for each thing, short sentences, no hard breaks.

Every Chinese text the project ships is read here: the ``msgstr`` of ``chapters/zh/po/*.po`` (markdown cells,
code comments, docstrings), README.zh-CN.md, TROUBLESHOOTING.zh-CN.md, ``docs/*.zh-CN.md``, GLOSSARY.md's
Chinese, ``course/student/messages_zh.json``, the comments of ``chapters/zh/scripts/`` and of the exercises' work files
(``chapters/zh/exercises/**/exNN_work/*.py``) and the Chinese site's labels (``course/publishing/site_pages.py``). Code (fenced blocks, inline code, link targets, tags) is left out: the rules are
about the prose.

The rules are tables, so that a new chapter written on another machine, or a new translator, cannot bring
the drift back, and so that each forbidden variant has a failing example below:

- ``TERMS``: the chosen word for each drifting term, the variants it replaces and where a variant is the
  right word after all (a ``单元`` of FSDP is not a notebook cell);
- ``FIRST_USE``: DDP and FSDP are named in Chinese in the first cell (or paragraph) that uses them;
- ``MAX_SENTENCE``: no sentence longer than 100 Chinese characters (``LONG_SENTENCES`` lists the ones
  written before the rule that are still long; it may only shrink: an entry that is short now fails);
- no hard line break inside a Chinese sentence of a markdown text (the renderer joins the lines with a
  space, which shows in Chinese);
- no English comment or docstring left in a Chinese script or work file (``ENGLISH_WORDS`` words or more and
  no Chinese): a new comment in an English script must get its ``.po`` entry translated.

To fix a finding, edit the ``msgstr`` in the ``.po`` file (never the built notebook) and run
``python -m course.publishing.translate build``; for a doc, edit the doc.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import polib
import pytest

from course.publishing import code_comments, translate_comments
from course.publishing.site_pages import EDITIONS

REPO = Path(__file__).resolve().parents[2]
PO_DIR = REPO / "chapters" / "zh" / "po"
ZH_DOCS = ["README.zh-CN.md", "TROUBLESHOOTING.zh-CN.md",
           *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.zh-CN.md"))]

CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
FENCED = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK_TARGET = re.compile(r"\]\([^)\s]+\)")
HTML_TAG = re.compile(r"<[^>\n]+>")
URL = re.compile(r"https?://\S+")
MATH = re.compile(r"\$[^$\n]+\$")


@dataclass(frozen=True)
class Rule:
    """A drifting term: write ``chosen``; ``forbidden`` (a regex) matches the variants it replaces.

    ``unless`` (a regex) marks a text unit (one ``.po`` entry, one paragraph of a doc, one message) where
    the variant is the right word after all; ``only`` (a regex) limits the rule to the files it matches.
    ``bad`` and ``good`` are examples the unit tests run.
    """

    name: str
    forbidden: str
    chosen: str
    bad: str
    good: str
    unless: str = ""
    only: str = ""


#: The chosen form of each drifting term. Read by the tests below; each ``bad`` must fail.
TERMS = [
    Rule("barrier", r"(?i)\bbarriers?\b(?![^（）\n]*）)", "屏障（英文名只放在括号里：“屏障（barrier）”）",
         "所有 rank 在 barrier 处等待。", "所有 rank 在屏障（barrier）处等待；受监控的屏障（monitored barrier）。"),
    Rule("device plan", r"设备方案", "设备规划", "由设备方案决定。", "由设备规划决定。"),
    Rule("map-style", r"(?i)map-style", "映射式（数据集）", "map-style 数据集按索引读取。", "映射式数据集按索引读取。"),
    Rule("draft mode", r"(?i)draft ?模式|draft mode", "草稿模式", "用 draft 模式解码。", "用草稿模式解码。"),
    Rule("wall-clock time", r"挂钟", "墙钟时间", "挂钟时间是 3 秒。", "墙钟时间是 3 秒。"),
    Rule("the grown-up version", r"成熟版|加固版", "完整版", "脚本的成熟版在 common 里。",
         "脚本的完整版在 common 里。"),
    Rule("notebook cell", r"单元(?!格|测试)", "单元格（“单元”只用于 FSDP 的单元，unit）", "下一个单元会安装它。",
         "下一个单元格会安装它；FSDP 每个单元收集一次参数。", unless=r"FSDP|fully_shard|ZeRO|\bunits?\b"),
    Rule("CPU core", r"(?<![内双单四八多积审考])核(?![心对算查实验])", "核心（“双核”等固定说法除外）",
         "每个进程用 2 个核。", "每个进程用 2 个核心；在双核笔记本电脑上；卷积核；内核。"),
    Rule("torchrun agent", r"(?<!网络)代理(?!进程|服务器)", "代理进程（agent）", "一个代理加入。",
         "一个代理进程加入；通过代理服务器下载。"),
    Rule("batch size", r"批次大小|批量大小", "批大小", "批次大小是 64。", "批大小是 64。"),
    Rule("notebook", r"(?i)(?<!Jupyter )\bnotebooks?\b", "笔记本（“笔记本电脑”是 laptop）",
         "打开这个 notebook。", "打开这个笔记本，或 Jupyter Notebook。"),
    Rule("laptop", r"双核笔记本(?!电脑)", "双核笔记本电脑（“笔记本”单独用时是 notebook）",
         "在双核笔记本上约 1 分钟。", "在双核笔记本电脑上约 1 分钟。"),
    Rule("chapter number", r"第\d|\d(?:章|节)", "“第 3 章”“第 2.1 章”“第 4 步”：数字两边留空格",
         "见第3章和 3.1节。", "见第 3 章和第 3.1 节。"),
    Rule("died", r"死掉|死亡|死法|(?<!杀)死了", "崩溃 / 被杀 / 异常退出", "一个 rank 死掉了。",
         "一个 rank 崩溃了；它用 SIGKILL 杀死了自己。"),
    Rule("cross-check", r"交叉验证", "核对（交叉验证只指 cross-validation）", "两种方法交叉验证。",
         "两种方法互相核对；5 折交叉验证。", unless=r"折|[Cc]ross-validat"),
    Rule("running sum", r"滑动(?!平均)", "累积（running sum）/ 滑动平均（moving average）",
         "只保留滑动累加的和。", "只保留累积的和；BatchNorm 的滑动平均。"),
    Rule("public check", r"可见检查", "公开检查", "可见检查已通过。", "公开检查已通过。"),
    Rule("dash", r"(?<=[\u4e00-\u9fff\d]) — (?=[\u4e00-\u9fff])", "——（中文的破折号占两格）", "## 练习 6 — 排查设备选择",
         "## 练习 6 —— 排查设备选择；（— 表示没有）"),
    Rule("got", r"得到的是|实际得到", "实际为（check messages' “got”）", "应为 2；得到的是 3", "应为 2，实际为 3",
         only=r"messages_zh\.json"),
    Rule("exercise contents", r"本章内容", "本练习内容（练习笔记本的开头）", "## 本章内容", "## 本练习内容",
         only=r"/ex\d\d_"),
]
TERM_NAMES = [rule.name for rule in TERMS]

#: English abbreviations named in full, in Chinese, in the first cell or paragraph of a text that uses them.
FIRST_USE = {"DDP": (r"(?<![A-Za-z_])DDP(?![A-Za-z_])", "分布式数据并行（DDP）"),
             "FSDP": (r"(?<![A-Za-z_])FSDP", "完全分片数据并行（FSDP")}
MAX_SENTENCE = 100  # Chinese characters

#: Sentences written before the length rule that are still longer (``file: where``). Only shrinks.
LONG_SENTENCES: set[str] = set()

#: Files whose findings are not fixed yet: skipped here, with the Chinese scripts of their chapters. Empty: every
#: chapter passes; a file listed here must still have a finding (the list only shrinks).
PENDING: set[str] = set()


def is_pending(file: str) -> bool:
    """A file of ``PENDING``, or a Chinese script of a chapter whose ``.po`` file is pending."""
    script = re.match(r"chapters/zh/scripts/([^/]+)/", file)
    return file in PENDING or bool(script and any(re.match(rf"chapters/zh/po/{script[1]}_", f) for f in PENDING))


@dataclass(frozen=True)
class Text:
    """One unit of Chinese: a ``.po`` entry, a paragraph of a doc, a message, a script's comment."""

    file: str  # repo-relative
    where: str  # msgctxt, line number, message key
    text: str  # prose: code left out
    markdown: bool  # line breaks are the author's (markdown) rather than a comment's
    context: str = ""  # what a rule's ``unless`` reads besides the text: the English it translates


def prose(text: str) -> str:
    """What a reader reads as text: no code blocks, inline code, link targets, URLs, tags or math."""
    for pattern, by in ((FENCED, " "), (INLINE_CODE, " "), (LINK_TARGET, "]"), (URL, " "), (HTML_TAG, " "),
                        (MATH, " ")):
        text = pattern.sub(by, text)
    return text


def paragraphs(markdown: str) -> list[tuple[int, str]]:
    """``(first line number, paragraph)`` of a markdown file, code blocks left out."""
    found, lines, start = [], [], 1
    in_fence = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if line.strip():
            if not lines:
                start = number
            lines.append(line)
        elif lines:
            found.append((start, "\n".join(lines)))
            lines = []
    if lines:
        found.append((start, "\n".join(lines)))
    return found


def po_texts(path: Path) -> list[Text]:
    po = polib.pofile(str(path), wrapwidth=0)
    name = path.relative_to(REPO).as_posix()
    return [Text(name, entry.msgctxt or "", prose(entry.msgstr),
                 not translate_comments.is_comment_context(entry.msgctxt), entry.msgid)
            for entry in po if not entry.obsolete and entry.msgstr]


def doc_texts(doc: str) -> list[Text]:
    return [Text(doc, f"line {line}", prose(paragraph), True)
            for line, paragraph in paragraphs((REPO / doc).read_text(encoding="utf-8"))]


def glossary_texts() -> list[Text]:
    """GLOSSARY.md's Chinese: its Chinese paragraphs and the 中文 and 中文释义 columns of its tables."""
    found, header = [], None
    for line, paragraph in paragraphs((REPO / "GLOSSARY.md").read_text(encoding="utf-8")):
        if not paragraph.startswith("|"):
            if 2 * len(CJK.findall(paragraph)) > len(re.findall(r"[A-Za-z]", prose(paragraph))):  # Chinese
                found.append(Text("GLOSSARY.md", f"line {line}", prose(paragraph), True))
            continue
        for offset, row in enumerate(paragraph.splitlines()):
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            if offset == 0:
                header = cells
            elif offset > 1:
                columns = dict(zip(header, cells, strict=False))
                chinese = "\n".join(columns.get(c, "") for c in ("中文", "中文释义"))
                found.append(Text("GLOSSARY.md", f"line {line + offset}", prose(chinese), False))
    return found


def message_texts() -> list[Text]:
    messages = json.loads((REPO / "course" / "student" / "messages_zh.json").read_text(encoding="utf-8"))
    return [Text("course/student/messages_zh.json", english[:50], prose(chinese), False, english)
            for english, chinese in messages.items()]


def zh_code_files() -> list[Path]:
    """Every Python file of the Chinese edition a reader opens: ``chapters/zh/scripts/`` and the exercises' work
    files (``exNN_work/``: beside the instructor sources and as handed out beside the student versions)."""
    zh = REPO / "chapters" / "zh"
    return sorted((zh / "scripts").rglob("*.py")) + sorted((zh / "exercises").rglob("ex[0-9][0-9]_work/*.py"))


def script_texts() -> list[Text]:
    found = []
    for path in zh_code_files():
        source = path.read_text(encoding="utf-8")  # a script about FSDP may say 单元 in any comment
        for comment in code_comments.comments(source, everything=True):
            found.append(Text(path.relative_to(REPO).as_posix(), comment.text[:30], prose(comment.text), False,
                              source))
    return found


def site_texts() -> list[Text]:
    """The Chinese site's own words (headings, notes, page titles): ``course.publishing.site_pages``' zh labels."""
    labels = EDITIONS["zh"].labels
    return [Text("course/publishing/site_pages.py", f"zh label {key}", prose(text), False) for key, text in labels.items()
            if CJK.search(text)]


def all_texts() -> list[Text]:
    texts = [t for path in sorted(PO_DIR.glob("*.po")) for t in po_texts(path)]
    texts += [t for doc in ZH_DOCS for t in doc_texts(doc)]
    return texts + glossary_texts() + message_texts() + script_texts() + site_texts()


# --- The checks: each returns findings as "file: where: what" lines. ---

def term_findings(text: Text) -> list[str]:
    found = []
    for rule in TERMS:
        if rule.only and not re.search(rule.only, text.file):
            continue
        if rule.unless and re.search(rule.unless, text.text + "\n" + text.context):
            continue
        for match in re.finditer(rule.forbidden, text.text):
            around = text.text[max(0, match.start() - 12):match.end() + 12].replace("\n", " ")
            found.append(f"{text.file}: {text.where}: {rule.name}: {match[0]!r} in …{around}… — write {rule.chosen}")
    return found


SENTENCE_END = re.compile(r"(?<=[。！？!?])|\n")


def sentences(text: str) -> list[str]:
    """The sentences of a prose text: split after 。！？ and at line breaks (list items, table rows)."""
    return [s.strip() for s in SENTENCE_END.split(text.replace("|", "\n")) if s.strip()]


def long_sentences(text: Text) -> list[str]:
    return [f"{text.file}: {text.where}: a sentence of {len(CJK.findall(s))} Chinese characters "
            f"(at most {MAX_SENTENCE}): {s[:40]}…" for s in sentences(text.text)
            if len(CJK.findall(s)) > MAX_SENTENCE]


#: A line that starts a markdown block of its own (heading, list item, table row, quote, tag, badge).
BLOCK_START = re.compile(r"\s*([#>|*+-]\s|\d+[.)]\s|[|<!\[]|\*\*|\$\$|-{3,}|\s{4})")
OPEN_END = re.compile(r"[\u3400-\u9fff，、；：（“《]$")


def hard_breaks(text: Text) -> list[str]:
    """Lines of a markdown text that end mid-sentence in Chinese and go on in the next line."""
    if not text.markdown:
        return []
    lines = text.text.split("\n")
    return [f"{text.file}: {text.where}: a line break inside a sentence: …{line[-15:]}⏎{after[:15]}…"
            for line, after in zip(lines, lines[1:], strict=False)
            if OPEN_END.search(line.rstrip()) and after.strip() and not BLOCK_START.match(after)
            and not line.lstrip().startswith(("|", "#"))]


#: A comment or docstring with this many English words and no Chinese was left untranslated.
ENGLISH_WORDS = 4
#: An English word of a comment: letters only, maybe quoted or followed by punctuation (not ``x.y`` or ``f(x)``).
ENGLISH_WORD = re.compile(r"[(`\"']*[A-Za-z]{2,}[)`\"',.;:!?]*")


def english_comments(file: str, source: str) -> list[str]:
    """The comments and docstrings of a Chinese script that are still English (markers such as ``# YOUR CODE
    HERE`` and ``### BEGIN SOLUTION`` are never offered for translation, so never found)."""
    found = []
    for comment in code_comments.comments(source):  # those with a Latin word and no Chinese
        words = [w for w in comment.text.split() if ENGLISH_WORD.fullmatch(w)]
        if len(words) >= ENGLISH_WORDS:
            line = source[:comment.start].count("\n") + 1
            found.append(f"{file}: line {line}: an English {comment.kind} {comment.text.splitlines()[0][:50]!r}: "
                         "translate its entry in chapters/zh/po/, then run `python -m course.publishing.translate build`")
    return found


HEADING = re.compile(r"^#.*$", re.M)


def first_use_findings(texts: list[Text]) -> list[str]:
    """In each file (cells in order), the first text saying DDP or FSDP in its prose (headings aside) names it
    in Chinese."""
    found = []
    by_file: dict[str, list[Text]] = {}
    for text in texts:
        if text.markdown:
            by_file.setdefault(text.file, []).append(text)
    for file, units in by_file.items():
        for abbreviation, (pattern, full) in FIRST_USE.items():  # a heading may use the short name
            first = next((u for u in units if re.search(pattern, HEADING.sub("", u.text))), None)
            if first is not None and full not in first.text:
                found.append(f"{file}: {first.where}: the first to say {abbreviation}: write {full}… there")
    return found


def findings(texts: list[Text]) -> list[str]:
    found = first_use_findings(texts)
    for text in texts:
        found += term_findings(text) + hard_breaks(text)
        if f"{text.file}: {text.where}" not in LONG_SENTENCES:
            found += long_sentences(text)
    return found


@pytest.fixture(scope="module")
def texts() -> list[Text]:
    return all_texts()


def _shipped(texts: list[Text]) -> list[Text]:
    return [t for t in texts if not is_pending(t.file)]


# --- The rules fail on their examples. ---

@pytest.mark.parametrize("rule", TERMS, ids=TERM_NAMES)
def test_each_forbidden_variant_fails_and_the_chosen_form_passes(rule):
    file = "chapters/zh/po/ex01_x.po" if "ex" in rule.only else "course/student/messages_zh.json" if rule.only else "x.po"
    bad = term_findings(Text(file, "x#1", rule.bad, True))
    assert bad and all(f": {rule.name}: " in f for f in bad), f"{rule.bad!r} passes the {rule.name} rule"
    assert term_findings(Text(file, "x#1", rule.good, True)) == [], rule.good
    if rule.only:  # and only there
        assert term_findings(Text("chapters/zh/po/01_x.po", "x#1", rule.bad, True)) == []


def test_variants_in_code_are_left_alone():
    text = Text("x.po", "x#1", prose("调用 `dist.barrier()`，见 [第 3 章](03_x.ipynb)，打开 `notebook.ipynb`。"), True)
    assert term_findings(text) == []


def test_the_first_use_of_ddp_and_fsdp_is_named_in_chinese():
    units = [Text("x.po", "x#0", "# 用 DDP 训练", True), Text("x.po", "x#1", "本章讲 DDP。", True),
             Text("x.po", "x#2", "分布式数据并行（DDP）很快。", True),
             Text("y.po", "y#0", "完全分片数据并行（FSDP2）分片参数；分布式数据并行（DDP）不分片。", True),
             Text("y.po", "y#1", "FSDP 与 DDP。", True)]
    assert first_use_findings(units) == ["x.po: x#1: the first to say DDP: write 分布式数据并行（DDP）… there"]


def test_a_long_sentence_fails_and_a_split_one_passes():
    long = "我们" + "把数据分成很多片" * 13 + "。"
    assert long_sentences(Text("x.po", "x#1", long, True))
    split = "我们把数据分成很多片。" * 13
    assert long_sentences(Text("x.po", "x#1", split, True)) == []


def test_a_hard_line_break_inside_a_sentence_fails():
    broken = Text("x.md", "line 1", "本术语表收录指南中的术语，以及笔记本和\nPyTorch 文档中的说法。", True)
    assert hard_breaks(broken)
    ok = Text("x.md", "line 1", "第一句。\n- 一个列表项\n- 另一个，\n| 表 | 格 |\n## 标题", True)
    assert hard_breaks(ok) == []
    assert hard_breaks(Text("x.py", "c", "一行注释，\n接着一行", False)) == []


def test_an_english_comment_or_docstring_left_in_a_chinese_script_fails():
    script = ('"""Train a small model on N ranks.\n\n    torchrun train.py\n"""\n'
              "import os  # the folder the checkpoints go to\n"
              "# YOUR CODE HERE\n### BEGIN SOLUTION\nx = os.sep  # os.sep\n### END SOLUTION\n")
    found = english_comments("chapters/zh/scripts/x/train.py", script)
    assert [f.split(": ")[1] for f in found] == ["line 1", "line 5"], found
    assert "an English trailing 'the folder the checkpoints go to'" in found[1]
    chinese = script.replace("Train a small model on N ranks.", "在 N 个 rank 上训练一个小模型。").replace(
        "the folder the checkpoints go to", "检查点写到哪个文件夹")
    assert english_comments("chapters/zh/scripts/x/train.py", chinese) == []


# --- The project's Chinese follows them. ---

def test_every_shipped_chinese_text_is_read(texts):
    files = {t.file for t in texts}
    assert {"README.zh-CN.md", "TROUBLESHOOTING.zh-CN.md", "GLOSSARY.md", "course/student/messages_zh.json",
            "course/publishing/site_pages.py"} <= files
    assert len([f for f in files if f.endswith(".po")]) >= 20
    assert [f for f in files if f.startswith("chapters/zh/scripts/")]
    assert [f for f in files if f.startswith("chapters/zh/exercises/solutions/ex06_work/")]
    assert [f for f in files if f.startswith("chapters/zh/exercises/ex06_work/")]


def test_no_english_comment_is_left_in_a_chinese_script_or_work_file():
    files = zh_code_files()
    assert {p.parent.name for p in files} >= {"04_1", "06_4", "ex04_work", "ex06_work", "ex07_work"}
    found = [f for path in files if not is_pending(path.relative_to(REPO).as_posix())
             for f in english_comments(path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8"))]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("rule", TERMS, ids=TERM_NAMES)
def test_one_word_for_each_thing(texts, rule):
    found = [f for t in _shipped(texts) for f in term_findings(t) if f": {rule.name}: " in f]
    assert found == [], "\n".join(found)


def test_ddp_and_fsdp_are_named_in_chinese_at_first_use(texts):
    found = first_use_findings(_shipped(texts))
    assert found == [], "\n".join(found)


def test_no_sentence_is_too_long(texts):
    found = [f for t in _shipped(texts) if f"{t.file}: {t.where}" not in LONG_SENTENCES
             for f in long_sentences(t)]
    assert found == [], "split these sentences:\n" + "\n".join(found)


def test_the_long_sentence_allowlist_only_shrinks(texts):
    still = {f"{t.file}: {t.where}" for t in texts if long_sentences(t)}
    fixed = sorted(LONG_SENTENCES - still)
    assert fixed == [], f"no longer long: remove them from LONG_SENTENCES: {fixed}"


def test_no_hard_line_break_inside_a_sentence(texts):
    found = [f for t in _shipped(texts) for f in hard_breaks(t)]
    assert found == [], "join these lines:\n" + "\n".join(found)


def test_each_pending_file_still_has_something_to_fix(texts):
    clean = sorted(f for f in PENDING if not findings([t for t in texts if t.file == f]))
    assert clean == [], f"these files pass the guard now: remove them from PENDING: {clean}"


# --- README.zh-CN.md in sync with README.md. ---

#: README.md's sections and their headings in README.zh-CN.md, in order.
README_SECTIONS = {"Two commands": "两条命令", "Chapter map": "章节对照", "Where to go next": "接下来去哪里"}
#: Sections only the Chinese README has, and why: their English lives in English-only pages.
ZH_ONLY_SECTIONS = {
    "中文版是怎样保持同步的": "the translation workflow: CONTRIBUTING.md (English) has it",
    "测试是怎样工作的": "CONTRIBUTING.md's How the tests work, for readers who read no English",
}


def _headings(readme: str) -> list[str]:
    text = FENCED.sub("", (REPO / readme).read_text(encoding="utf-8"))
    return re.findall(r"^## (.+)$", text, re.M)


def _chapter_rows(readme: str, heading: str) -> list[tuple[str, list[str]]]:
    """``(notebook, §-numbers)`` of each row of a README's chapter map."""
    section = (REPO / readme).read_text(encoding="utf-8").split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| [`"):
            cells = line.strip("|").split("|")
            rows.append((re.search(r"\[`([^`]+)`\]", cells[0])[1], re.findall(r"§\d+(?:\.\d+)*", cells[1])))
    return rows


def test_the_readmes_have_the_same_sections_in_the_same_order():
    english, chinese = _headings("README.md"), _headings("README.zh-CN.md")
    unmapped = [h for h in english if h not in README_SECTIONS]
    assert unmapped == [], f"README.md has new sections: add them to README.zh-CN.md and README_SECTIONS: {unmapped}"
    twins = [README_SECTIONS[h] for h in english]
    assert [h for h in chinese if h in twins] == twins, "README.zh-CN.md lacks or reorders a section"
    extra = [h for h in chinese if h not in twins and h not in ZH_ONLY_SECTIONS]
    assert extra == [], f"README.zh-CN.md has sections README.md lacks: {extra}"


def test_the_readmes_chapter_maps_have_the_same_rows_and_guide_sections():
    english = _chapter_rows("README.md", "Chapter map")
    assert len(english) >= 13
    assert _chapter_rows("README.zh-CN.md", "章节对照") == english


def test_the_chinese_readme_has_a_word_on_package_mirrors():
    text = (REPO / "README.zh-CN.md").read_text(encoding="utf-8")
    assert "PIP_INDEX_URL" in text and "TORCH_INDEX" in text and "镜像" in text
