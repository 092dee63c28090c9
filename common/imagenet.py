"""The ImageNet statistics the guide's ``Normalize`` uses (§2.2.2), in a module that imports nothing.

``common.transforms`` re-exports them; code that only normalizes (the cache path of a DDP
worker) takes them from here and does not import torchvision.

Introduced in chapters/02_2_transforms_augmentation.ipynb.
"""

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
