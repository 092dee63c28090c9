"""course.publishing.site_pages without Sphinx: what a staged page may load."""

from __future__ import annotations

from course.publishing.bootstrap import badge_source, repository
from course.publishing.site_pages import local_only


def test_remote_badges_become_text_links_and_local_images_stay():
    badge = badge_source(repository(), "01_pytorch_basics.ipynb")
    assert "https://colab.research.google.com/assets/colab-badge.svg" in badge
    staged = local_only(badge)
    assert "colab-badge.svg" not in staged and "open-in-kaggle.svg" not in staged
    assert "[Open In Colab](https://colab.research.google.com/github/" in staged
    assert "(https://kaggle.com/kernels/welcome?src=" in staged
    figure = "![Ring all-reduce on 4 ranks](figures/ring_allreduce.svg)"
    assert local_only(figure) == figure
    assert local_only("[![local](figures/x.svg)](https://example.org)") == \
        "[![local](figures/x.svg)](https://example.org)"
