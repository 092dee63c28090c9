"""Shared code for the chapter notebooks of the PyTorch data-pipelines companion.

Import what a chapter needs from here (``from common import CustomImageDataset``) or from
the topic module (``from common.data import CustomImageDataset``). Importing has no side
effects: nothing is seeded, printed, downloaded or configured.

The names below are imported on first use (PEP 562), not when ``common`` is: a process that
needs one topic (a DDP worker, a grading judge) does not pay for torchvision, pandas and
matplotlib it never uses. ``from common import SmallCNN`` imports ``common.models`` only.

The facade lists the core's names only (the top-level modules, each used by more than one
chapter), each defined in the module it names;
a chapter package's names come from that package (``from common.shards import
ShardedImageDataset``). ``tests/unit/test_layout.py`` checks both (ARCHITECTURE.md, "The facade
rule").
"""

from __future__ import annotations

from common.lazy import lazy_names

#: Where each name of ``from common import ...`` lives.
_WHERE = {
    "AddGaussianNoise": "common.transforms",
    "BadSampleError": "common.annotations",
    "balanced_sampler": "common.loaders",
    "channel_stats": "common.stats",
    "ChannelStats": "common.stats",
    "CLASSES": "common.shapes",
    "ClassicEvalPreset": "common.transforms",
    "ClassicTrainPreset": "common.transforms",
    "count_parameters": "common.models",
    "CustomDataset": "common.data",
    "CustomImageDataset": "common.data",
    "describe_device": "common.device",
    "ensure_data": "common.synthetic",
    "evaluate": "common.training",
    "fit": "common.training",
    "get_device": "common.device",
    "History": "common.training",
    "IMAGENET_MEAN": "common.imagenet",
    "IMAGENET_STD": "common.imagenet",
    "list_collate": "common.loaders",
    "load_rgb": "common.data",
    "PadCollate": "common.loaders",
    "parse_label": "common.annotations",
    "plot_channel_histograms": "common.plotting",
    "plot_class_counts": "common.plotting",
    "plot_history": "common.plotting",
    "read_figure": "common.readings",
    "RunningChannelStats": "common.stats",
    "seed_everything": "common.device",
    "seed_worker": "common.loaders",
    "ShapesData": "common.synthetic",
    "show_images": "common.plotting",
    "SlowStorage": "common.storage",
    "SmallCNN": "common.models",
    "SyntheticConfig": "common.synthetic",
    "train_one_epoch": "common.training",
    "unnormalize": "common.plotting",
    "V2EvalPreset": "common.transforms",
    "V2TrainPreset": "common.transforms",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
