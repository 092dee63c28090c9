"""Shared code for the chapter notebooks of the PyTorch data-pipelines companion.

Import what a chapter needs from here (``from common import CustomImageDataset``) or from
the topic module (``from common.data import CustomImageDataset``). Importing has no side
effects: nothing is seeded, printed, downloaded or configured.
"""

from common.data import BadSampleError, CustomDataset, CustomImageDataset, load_rgb
from common.device import describe_device, get_device, seed_everything
from common.loaders import seed_worker
from common.models import SmallCNN, count_parameters
from common.plotting import plot_history, show_images, unnormalize
from common.shapes import CLASSES
from common.synthetic import ShapesData, SyntheticConfig, ensure_data
from common.training import History, evaluate, fit, train_one_epoch
from common.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ClassicEvalPreset,
    ClassicTrainPreset,
    V2EvalPreset,
    V2TrainPreset,
)

__all__ = [
    "BadSampleError",
    "CLASSES",
    "ClassicEvalPreset",
    "ClassicTrainPreset",
    "CustomDataset",
    "CustomImageDataset",
    "History",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ShapesData",
    "SmallCNN",
    "SyntheticConfig",
    "V2EvalPreset",
    "V2TrainPreset",
    "count_parameters",
    "describe_device",
    "ensure_data",
    "evaluate",
    "fit",
    "get_device",
    "load_rgb",
    "plot_history",
    "seed_everything",
    "seed_worker",
    "show_images",
    "train_one_epoch",
    "unnormalize",
]
