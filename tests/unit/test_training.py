"""The training loop, checked against a hand-written loop."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from common.training import History, evaluate, fit, train_one_epoch


def _toy_loaders(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(64, 5, generator=generator)
    labels = (features[:, 0] > 0).long()
    dataset = TensorDataset(features, labels)
    return DataLoader(dataset, batch_size=16), DataLoader(dataset, batch_size=64)


def test_train_one_epoch_equals_a_manual_loop():
    train_loader, _ = _toy_loaders()
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 2)
    manual = torch.nn.Linear(5, 2)
    manual.load_state_dict(model.state_dict())
    opt_a = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(manual.parameters(), lr=0.1)
    loss, _ = train_one_epoch(model, train_loader, opt_a, torch.device("cpu"), progress=False)
    losses = []
    for features, labels in train_loader:
        opt_b.zero_grad()
        step_loss = torch.nn.functional.cross_entropy(manual(features), labels)
        step_loss.backward()
        opt_b.step()
        losses.append(step_loss.item())
    assert loss == pytest.approx(sum(losses) / len(losses), rel=1e-6)
    assert torch.allclose(model.weight, manual.weight)


def test_evaluate_counts_every_sample():
    _, val_loader = _toy_loaders()
    model = torch.nn.Linear(5, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([1.0, 0.0]))  # always predicts class 0
    _, accuracy = evaluate(model, val_loader, torch.device("cpu"))
    labels = torch.cat([y for _, y in val_loader])
    assert accuracy == pytest.approx((labels == 0).float().mean().item())


def test_fit_learns_and_records_history():
    train_loader, val_loader = _toy_loaders()
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 2)
    history = fit(model, train_loader, val_loader, num_epochs=15, device=torch.device("cpu"),
                  optimizer=torch.optim.SGD(model.parameters(), lr=0.5), progress=False)
    assert isinstance(history, History)
    assert len(history.val_acc) == 15
    assert history.val_acc[-1] > 0.9
    assert history.train_loss[-1] < history.train_loss[0]


def test_empty_loader_is_an_error():
    empty = DataLoader(TensorDataset(torch.empty(0, 5), torch.empty(0).long()), batch_size=4)
    with pytest.raises(ValueError, match="no samples"):
        evaluate(torch.nn.Linear(5, 2), empty, torch.device("cpu"))
