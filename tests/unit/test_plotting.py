"""Plot helpers return figures with what they promise."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from common.plotting import (
    plot_channel_histograms,
    plot_class_counts,
    plot_history,
    show_images,
    unnormalize,
)
from common.training import History
from common.transforms import IMAGENET_MEAN, IMAGENET_STD


def test_unnormalize_inverts_normalize():
    images = torch.rand(2, 3, 8, 8)
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    assert torch.allclose(unnormalize((images - mean) / std, IMAGENET_MEAN, IMAGENET_STD), images,
                          atol=1e-6)


def test_show_images_lays_out_a_grid_with_titles():
    fig = show_images([torch.rand(3, 8, 8)] * 5, titles=list("abcde"), ncols=3)
    titled = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(fig.axes) == 6 and titled == list("abcde")


def test_show_images_refuses_an_empty_list():
    with pytest.raises(ValueError):
        show_images([])


def test_plot_history_draws_both_curves():
    history = History([1.0, 0.5], [0.4, 0.8], [1.1, 0.7], [0.3, 0.7])
    fig = plot_history(history)
    loss_ax, acc_ax = fig.axes
    assert list(loss_ax.lines[1].get_ydata()) == [1.1, 0.7]
    assert list(acc_ax.lines[0].get_ydata()) == [0.4, 0.8]


def test_plot_channel_histograms_draws_one_panel_per_group_and_one_curve_per_channel():
    raw = torch.rand(4, 3, 8, 8)
    raw[:, 2] *= 0.5  # blue in [0, 0.5]: a channel mix-up would show in the extents below
    groups = {"raw": raw, "shifted": raw[0] * 4 - 2}  # (C, H, W) is accepted too
    fig = plot_channel_histograms(groups, bins=10)
    assert [ax.get_title() for ax in fig.axes] == ["raw", "shifted"]
    for ax, images in zip(fig.axes, groups.values(), strict=True):
        images = images.reshape(-1, 3, 8, 8)
        assert [p.get_label() for p in ax.patches] == ["R", "G", "B"]
        for c, patch in enumerate(ax.patches):
            xs = patch.get_xy()[:, 0]
            assert xs.min() == pytest.approx(images[:, c].min().item(), abs=1e-6)
            assert xs.max() == pytest.approx(images[:, c].max().item(), abs=1e-6)


def test_plot_class_counts_draws_each_setting_as_bars_in_class_order():
    counts = {"before": [160, 80, 5], "after": [70, 90, 85]}
    fig = plot_class_counts(counts, ["circle", "square", "triangle"])
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["circle", "square", "triangle"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["before", "after"]
    for container, values in zip(ax.containers, counts.values(), strict=True):
        assert [bar.get_height() for bar in container] == values
    before_x = [bar.get_x() for bar in ax.containers[0]]
    after_x = [bar.get_x() for bar in ax.containers[1]]
    assert all(b < a < b + 1 for b, a in zip(before_x, after_x, strict=True))  # side by side, per class
