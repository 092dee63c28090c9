"""The small CNN."""

from __future__ import annotations

import torch

from common.models import SmallCNN, count_parameters


def test_output_shape_is_independent_of_input_size():
    model = SmallCNN(num_classes=6).eval()
    for size in (32, 64, 97):
        assert model(torch.randn(2, 3, size, size)).shape == (2, 6)


def test_count_parameters_matches_a_manual_count():
    model = SmallCNN(num_classes=4, width=8)
    manual = sum(p.numel() for p in model.parameters())
    assert count_parameters(model) == manual
    model.classifier.weight.requires_grad_(False)
    assert count_parameters(model) == manual - model.classifier.weight.numel()


def test_the_model_can_overfit_one_batch():
    torch.manual_seed(0)
    model = SmallCNN(num_classes=3, width=8)
    images, labels = torch.randn(12, 3, 32, 32), torch.arange(12) % 3
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1
