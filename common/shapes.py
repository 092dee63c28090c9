"""Drawing one synthetic image: a rotated shape on a noisy background.

The synthetic dataset (``common.synthetic``) is made of these images. Every image is
drawn from its own NumPy generator, so it depends only on ``(seed, split, index)``.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

#: Class names, sorted: the CSV label of a class is its index here, which is also the
#: index torchvision's ``ImageFolder`` gives the class folder of the same name.
CLASSES: tuple[str, ...] = ("circle", "cross", "hexagon", "square", "star", "triangle")


def _unit_outline(name: str) -> np.ndarray:
    """Vertices of a shape of radius ~1 around the origin, shape (n, 2)."""
    if name == "circle":
        angles = np.linspace(0, 2 * math.pi, 48, endpoint=False)
        return np.stack([np.cos(angles), np.sin(angles)], axis=1)
    if name in ("triangle", "square", "hexagon"):
        sides = {"triangle": 3, "square": 4, "hexagon": 6}[name]
        angles = np.linspace(0, 2 * math.pi, sides, endpoint=False) + math.pi / sides
        return np.stack([np.cos(angles), np.sin(angles)], axis=1)
    if name == "star":
        angles = np.linspace(0, 2 * math.pi, 10, endpoint=False)
        radii = np.where(np.arange(10) % 2 == 0, 1.0, 0.42)
        return np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)
    if name == "cross":
        a, b = 1.0, 0.33
        return np.array(
            [(b, a), (-b, a), (-b, b), (-a, b), (-a, -b), (-b, -b),
             (-b, -a), (b, -a), (b, -b), (a, -b), (a, b), (b, b)],
            dtype=float,
        )
    raise ValueError(f"unknown shape {name!r}; expected one of {CLASSES}")


_LUMA = np.array([0.299, 0.587, 0.114])


def _contrasting_colour(rng: np.random.Generator, background: np.ndarray) -> tuple[int, ...]:
    """A random colour whose brightness differs from the background's by at least 90 (of 255).

    Contrast in brightness (either darker or lighter), not only in hue, keeps the task
    learnable in a few hundred steps by a small CNN: edges show up in every colour channel.
    """
    for _ in range(200):
        colour = rng.integers(0, 256, size=3)
        if abs(float((colour - background) @ _LUMA)) >= 90:
            return tuple(int(c) for c in colour)
    return tuple(int(c) for c in 255 - background)


def draw_shape_image(label: int, rng: np.random.Generator, *, min_size: int = 200,
                     max_size: int = 400) -> Image.Image:
    """Draw one RGB image of class ``CLASSES[label]``.

    Random: image width and height in ``[min_size, max_size]``, background colour and
    noise, shape colour (always contrasting in brightness), size, position inside the
    central square, rotation (±25°), up to three distractor lines, and whether the shape
    is filled or outlined.

    Args:
        label: Class index into ``CLASSES``.
        rng: The generator that decides everything about this image.
        min_size: Smallest side in pixels.
        max_size: Largest side in pixels.

    Returns:
        A PIL RGB image.

    Introduced in chapters/01_pytorch_basics.ipynb.
    """
    if not 0 <= label < len(CLASSES):
        raise ValueError(f"label {label} out of range 0..{len(CLASSES) - 1}")
    width, height = (int(v) for v in rng.integers(min_size, max_size + 1, size=2))
    background = rng.integers(0, 256, size=3)
    noise = rng.normal(0.0, rng.uniform(5, 30), size=(height, width, 3))
    pixels = np.clip(background + noise, 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels, mode="RGB")
    draw = ImageDraw.Draw(image)

    for _ in range(int(rng.integers(0, 4))):
        points = rng.uniform(0, 1, size=(2, 2)) * (width, height)
        draw.line([tuple(p) for p in points], fill=_contrasting_colour(rng, background),
                  width=int(rng.integers(1, 4)))

    # The shape lies inside the central square, so Resize + CenterCrop never cut it off.
    side = min(width, height)
    radius = rng.uniform(0.22, 0.40) * side
    slack = side / 2 - radius
    centre = np.array([width / 2, height / 2]) + rng.uniform(-slack, slack, size=2)
    # Upright up to ±25°: full rotations would make the classes take far longer to learn.
    angle = rng.uniform(-0.44, 0.44)
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    outline = _unit_outline(CLASSES[label]) @ rotation.T * radius + centre
    colour = _contrasting_colour(rng, background)
    polygon = [tuple(p) for p in outline]
    if rng.uniform() < 0.75:
        draw.polygon(polygon, fill=colour)
    else:
        draw.line(polygon + [polygon[0]], fill=colour, width=max(4, int(radius * 0.25)))
    return image
