"""Plot helpers return figures with what they promise."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from common.plotting import plot_history, show_images, unnormalize  # noqa: E402
from common.training import History  # noqa: E402
from common.transforms import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402


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
