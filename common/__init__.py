"""Shared code for the chapter notebooks of the PyTorch data-pipelines companion.

Import what a chapter needs from here (``from common import CustomImageDataset``) or from
the topic module (``from common.data import CustomImageDataset``). Importing has no side
effects: nothing is seeded, printed, downloaded or configured.
"""

from common.data import (
    BadSampleError,
    CustomDataset,
    CustomImageDataset,
    load_rgb,
    parse_label,
)
from common.device import describe_device, get_device, seed_everything
from common.iterable import CsvImageStream
from common.loaders import PadCollate, balanced_sampler, list_collate, seed_worker
from common.models import SmallCNN, count_parameters
from common.plotting import (
    plot_channel_histograms,
    plot_class_counts,
    plot_history,
    show_images,
    unnormalize,
)
from common.preload import PreloadedDataset
from common.shapes import CLASSES
from common.shards import ShardedImageDataset
from common.stats import ChannelStats, RunningChannelStats, channel_stats
from common.synthetic import ShapesData, SyntheticConfig, ensure_data
from common.training import History, evaluate, fit, train_one_epoch
from common.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    AddGaussianNoise,
    ClassicEvalPreset,
    ClassicTrainPreset,
    V2EvalPreset,
    V2TrainPreset,
)

__all__ = [
    "AddGaussianNoise",
    "BadSampleError",
    "CLASSES",
    "ChannelStats",
    "ClassicEvalPreset",
    "ClassicTrainPreset",
    "CsvImageStream",
    "CustomDataset",
    "CustomImageDataset",
    "History",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "PadCollate",
    "RunningChannelStats",
    "PreloadedDataset",
    "ShapesData",
    "ShardedImageDataset",
    "SmallCNN",
    "SyntheticConfig",
    "V2EvalPreset",
    "V2TrainPreset",
    "balanced_sampler",
    "channel_stats",
    "count_parameters",
    "describe_device",
    "ensure_data",
    "evaluate",
    "fit",
    "get_device",
    "list_collate",
    "load_rgb",
    "parse_label",
    "plot_channel_histograms",
    "plot_class_counts",
    "plot_history",
    "seed_everything",
    "seed_worker",
    "show_images",
    "train_one_epoch",
    "unnormalize",
]
