"""docs/parallelism.md and its Chinese twin: the map of the parallelisms, the links with their sources."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course.publishing.site_pages import EDITIONS

REPO = Path(__file__).resolve().parents[2]
PAGES = {"en": REPO / "docs" / "parallelism.md", "zh": REPO / "docs" / "parallelism.zh-CN.md"}
NAMED = ("DDP", "FSDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "HSDP", "DeviceMesh", "PCIe", "NVLink", "InfiniBand",
         "GbE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "torchdata.nodes", "in_order=False", "TorchCodec")


def _tables(text: str) -> list[list[str]]:
    """Each table's data rows (the header and the rule dropped)."""
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            tables.append([row for row in rows[2:]])
            rows = []
    return tables


@pytest.mark.parametrize("edition", sorted(PAGES))
def test_the_page_names_every_parallelism_link_and_tool(edition):
    text = PAGES[edition].read_text(encoding="utf-8")
    assert all(name in text for name in NAMED), [name for name in NAMED if name not in text]
    links = _tables(text)[1]
    assert len(links) == 7 and all(re.search(r"https://|IEEE 802\.3", row.split("|")[-2]) for row in links), \
        "every bandwidth names its source"


def test_both_editions_have_the_same_tables_and_links():
    en, zh = (PAGES[e].read_text(encoding="utf-8") for e in ("en", "zh"))
    assert [len(t) for t in _tables(en)] == [len(t) for t in _tables(zh)]
    assert re.findall(r"\]\((https://[^)]+)\)", en) == re.findall(r"\]\((https://[^)]+)\)", zh)


def test_the_site_shows_it_in_both_editions():
    for edition in EDITIONS.values():
        assert "parallelism.md" in dict(edition.guides) and edition.labels["parallelism.md"]
