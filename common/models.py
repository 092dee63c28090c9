"""The small convolutional network every chapter trains, its GroupNorm variant, and ``--model``.

``--model`` of the trainers is ``small_cnn`` or any torchvision classification model by its
builder name, with random weights (``create_model``); ``--weights`` loads a local state dict.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Three conv blocks, global average pooling and a linear classifier.

    Works for any input size (the pooling makes the classifier size-independent), is
    small enough to train in seconds on a laptop CPU, and learns the shapes dataset.

    Args:
        num_classes: Number of output logits.
        width: Channels of the first block; later blocks double it.
        in_channels: 3 for RGB.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """

    def __init__(self, num_classes: int = 6, *, width: int = 16, in_channels: int = 3) -> None:
        super().__init__()
        blocks = []
        channels = in_channels
        for out_channels in (width, width * 2, width * 4):
            blocks += [
                nn.Conv2d(channels, out_channels, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            channels = out_channels
        self.features = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.pool(self.features(images)).flatten(1)
        return self.classifier(features)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def batchnorm_to_groupnorm(model: nn.Module) -> nn.Module:
    """Replace every ``BatchNorm2d`` by a ``GroupNorm`` over the same channels, in place.

    GroupNorm normalises each sample on its own, so the loss is a plain mean over samples
    and a batch split across ranks gives exactly the gradient of the whole batch.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    for name, child in model.named_children():
        if isinstance(child, nn.BatchNorm2d):
            groups = 4 if child.num_features % 4 == 0 else 1
            setattr(model, name, nn.GroupNorm(groups, child.num_features))
        else:
            batchnorm_to_groupnorm(child)
    return model


#: The ``--model`` of every trainer that is not a torchvision builder name.
SMALL_CNN = "small_cnn"


def model_names() -> list[str]:
    """``small_cnn`` and every torchvision classification model's builder name (``resnet18``, ...).

    Introduced in docs/scripts.md ("Your own images").
    """
    import torchvision.models  # only for a torchvision --model: ~1.5 s

    return [SMALL_CNN, *torchvision.models.list_models(module=torchvision.models)]


def model_problem(name: str) -> str:
    """Why ``--model name`` names no model (``""`` if it names one), listing the valid names.

    Introduced in docs/scripts.md ("Your own images").
    """
    if name == SMALL_CNN:
        return ""
    names = model_names()
    return "" if name in names else f"unknown model {name!r}; one of: {', '.join(names)}"


def create_model(name: str, num_classes: int, *, width: int = 16) -> nn.Module:
    """``SmallCNN(num_classes, width=width)``, or torchvision's ``name`` with random weights.

    ``torchvision.models.get_model(name, weights=None, num_classes=num_classes)``: nothing is
    ever downloaded; ``width`` is SmallCNN's only.

    Introduced in docs/scripts.md ("Your own images").
    """
    if name == SMALL_CNN:
        return SmallCNN(num_classes, width=width)
    problem = model_problem(name)
    if problem:
        raise ValueError(f"--model: {problem}")
    import torchvision.models

    return torchvision.models.get_model(name, weights=None, num_classes=num_classes)


def check_input_size(model: nn.Module, image_size: int, *, name: str) -> None:
    """Refuse a model that cannot classify ``image_size`` images (one forward of a zero image).

    Raises:
        ValueError: Naming ``--model`` and ``--image-size`` (a ViT wants 224, ...).

    Introduced in docs/scripts.md ("Your own images").
    """
    training = model.training
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(1, 3, image_size, image_size))
    except (RuntimeError, ValueError, AssertionError, IndexError) as error:
        raise ValueError(f"--model {name} cannot take --image-size {image_size} images: "
                         f"{str(error).splitlines()[0][:300]}") from error
    finally:
        model.train(training)


def groupnorm_only(model: nn.Module, *, name: str) -> nn.Module:
    """``batchnorm_to_groupnorm(model)``, refusing a model left with other batch norms.

    Raises:
        ValueError: Naming ``--model`` and the first module GroupNorm cannot replace.

    Introduced in docs/scripts.md ("Your own images").
    """
    batchnorm_to_groupnorm(model)
    left = [(where, type(module).__name__) for where, module in model.named_modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm)]
    if left:
        raise ValueError(f"--model {name} keeps {len(left)} batch norm(s) GroupNorm cannot "
                         f"replace, first {left[0][0]} ({left[0][1]}): batch statistics per "
                         "rank are not the global batch's; pick another --model")
    return model


def load_weights(model: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Load the state dict saved at ``path`` into ``model``, strictly (every key, every shape).

    One exception, fine-tuning: torchvision's ImageNet weights (a classifier of 1000 outputs) load
    into a model for your K classes with every layer but the last ``nn.Linear``, which keeps its
    fresh initialization (said in one line).

    Raises:
        ValueError: Naming the file, and the keys missing, unexpected or of another shape.

    Introduced in docs/scripts.md ("Your own images").
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, IndexError,
            zipfile.BadZipFile) as error:  # what read_snapshot catches: a text file is an IndexError
        raise ValueError(f"--weights {path}: not a PyTorch state dict ({error})") from error
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"--weights {path}: holds a {type(state).__name__}, not a state dict "
                         "of tensors (what --save-final writes)")
    expected = model.state_dict()
    missing, unexpected = set(expected) - set(state), set(state) - set(expected)
    head = _new_head(model, state, expected)
    shapes = [f"{key} is {tuple(state[key].shape)} in the file, {tuple(expected[key].shape)} here"
              for key in sorted(set(expected) & set(state))
              if state[key].shape != expected[key].shape and key not in head]
    problems = ([f"missing {_first(missing)}"] if missing else []) \
        + ([f"unexpected {_first(unexpected)}"] if unexpected else []) + shapes[:3]
    if problems:
        statistics = any(key.endswith("running_mean") for key in missing | unexpected)
        hint = (" (BatchNorm statistics on one side only: the weights were saved under another "
                "--norm; GroupNorm models have none)") if statistics else ""
        raise ValueError(f"--weights {path} does not fit this {type(model).__name__}: "
                         + "; ".join(problems) + hint)
    if head:  # fine-tuning: pretrained weights (1000 ImageNet classes), a new head for yours
        classes = expected[next(key for key in sorted(head) if key.endswith("weight"))].shape[0]
        print(f"--weights {Path(path).name}: every layer loaded but the classifier "
              f"{', '.join(sorted(head))}, which starts anew for {classes} classes "
              "(fine-tuning)", flush=True)
        state = {key: value for key, value in state.items() if key not in head}
        state.update({key: expected[key] for key in head})
    model.load_state_dict(state)
    return model


#: The outputs of torchvision's pretrained classifiers: a file whose head has these is
#: fine-tuned (a new head), any other class count mismatch is refused.
IMAGENET_CLASSES = 1000


def _new_head(model: nn.Module, state: dict, expected: dict) -> set[str]:
    """The keys of ``model``'s last ``nn.Linear`` when they alone differ in shape from ``state``
    and the file's head has 1000 outputs (torchvision's ImageNet weights, a model for your K
    classes): else empty."""
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    if not linears:
        return set()
    keys = {f"{linears[-1]}.{part}" for part in ("weight", "bias")} & set(expected)
    differ = {key for key in set(expected) & set(state) if state[key].shape != expected[key].shape}
    weight = f"{linears[-1]}.weight"
    imagenet = weight in state and state[weight].shape[0] == IMAGENET_CLASSES
    return keys if imagenet and differ and differ <= keys else set()


def _first(keys: set[str], count: int = 4) -> str:
    ordered = sorted(keys)
    return ", ".join(ordered[:count]) + (f" (+{len(ordered) - count} more)"
                                         if len(ordered) > count else "")
