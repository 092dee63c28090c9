# %% [markdown]
# # Chapter 1 exercises — PyTorch basics
# **Guide sections:** §1 PyTorch简介与深度学习基础 · §1.1 深度学习的基本概念 · §1.2 PyTorch的框架和特点
# [Glossary / 术语表](../../../GLOSSARY.md)
# ## What you will learn
# - Tensor arithmetic with broadcasting, without loops.
# - Letting autograd compute a gradient, and leaving no trace of it behind.
# - Registering layers in an `nn.Module` so that PyTorch can see them.
# - A training loop that is correct step by step, and an evaluation that changes nothing.
#
# Five exercises, 10 points, from warm-up to challenging. They accompany `chapters/01_pytorch_basics.ipynb`.

# %% [markdown]
# ## How these exercises work
# Write your code in the cells that say `# YOUR CODE HERE` (replace the `raise NotImplementedError()`
# or the `...`), run that cell, then run the check cell below it. A check cell prints
# "not yet done" until you have answered, and fails with a message when something is wrong.
# When your work is graded, each check cell runs again together with hidden checks, and only the
# answer cells of your notebook are used: keep all of an exercise's code in its answer cell.
# Your answers then run in a process of their own, and the checks see only what your functions
# return and what they do to their arguments: return plain values (numbers, strings, tensors,
# arrays, lists of them), not objects of a class of your own that stand in for them.
#
# Each exercise heading gives its points, its difficulty (★☆☆ warm-up to ★★★ challenging) and about how
# long it takes. **Stuck?** Every exercise worth more than a point has 2–3 hints, from a nudge to the near
# answer, shown one at a time: `hint("ex3", 1)` in a cell of your own prints the first hint of Exercise 3,
# `hint("ex3", 2)` the next. Grading records how many you opened; it costs no points unless your instructor
# says so.
#
# **Checking your own work.** A check cell tells you at once whether your answer holds up. To run the hidden
# checks too, save this notebook and run, at the root of the repository,
# `make grade-me NOTEBOOK=chapters/exercises/ex01_pytorch_basics.ipynb` (or
# `python -m course.grading --self chapters/exercises/ex01_pytorch_basics.ipynb`): it grades this notebook where it
# is and prints the points of each exercise with the message of each failing check
# (`build/grade-me/report/feedback/me/` holds this notebook with a message under each check cell). It runs
# your answers in a sandbox where bubblewrap works (`make system-deps` installs it), and otherwise as trusted
# work, since they are your own, and says so. The solutions and the hidden checks are kept apart, in the
# instructor version of this notebook, `chapters/exercises/solutions/ex01_pytorch_basics.ipynb`: open it once you have tried.
#
# The first cell imports what the exercises use, seeds the random generators (so that the checks
# see the same numbers every run) and picks the device.

# %%
import numpy as np
import torch
from torch import nn

from common import SmallCNN, count_parameters, get_device, seed_everything
from course.student.checks import checks, hints

seed_everything(0)
hint = hints("ex01_pytorch_basics")  # hint("ex2", 1): the first hint of Exercise 2
device = get_device()
print(f"torch {torch.__version__}, device {device}")

# %% [markdown]
# ## Exercise 1 — Broadcasting (§1.2 PyTorch的框架和特点) · 1 point · ★☆☆ · ~10 min
# Write `standardize(x)`: for a 2-D float tensor `x` of shape `(N, D)`, return a new tensor in which
# every column has mean 0 and (population, `correction=0`) standard deviation 1. Use tensor
# operations and broadcasting, no Python loops, and do not modify `x`.

# %% nbgrader={"grade": false, "grade_id": "ex1-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def standardize(x: torch.Tensor) -> torch.Tensor:
    ### BEGIN SOLUTION
    return (x - x.mean(dim=0)) / x.std(dim=0, correction=0)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 1"):
    x = torch.randn(50, 3) * torch.tensor([1.0, 10.0, 0.1]) + torch.tensor([5.0, -2.0, 0.0])
    before = x.clone()
    z = standardize(x)
    assert torch.equal(x, before), "standardize must not modify its input"
    assert z.shape == x.shape, f"expected shape {tuple(x.shape)}, got {tuple(z.shape)}"
    assert torch.allclose(z.mean(dim=0), torch.zeros(3), atol=1e-5), "column means should be 0"
    assert torch.allclose(z.std(dim=0, correction=0), torch.ones(3), atol=1e-5), \
        "column standard deviations (correction=0) should be 1"
### BEGIN HIDDEN TESTS
x = torch.rand(7, 4, dtype=torch.float64) * 3
before = x.clone()
z = standardize(x)
assert torch.equal(x, before), "standardize must not modify its input"
expected = (x.numpy() - x.numpy().mean(axis=0)) / x.numpy().std(axis=0)
assert np.allclose(z.numpy(), expected), "values differ from (x - mean) / std per column"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 — Autograd (§1.2 PyTorch的框架和特点) · 2 points · ★★☆ · ~15 min
# Write `grad_of_mse(w, x, y)`: the gradient of the loss `((x @ w - y) ** 2).mean()` with respect to
# `w`, computed by autograd (not by hand). Leave no trace: afterwards `w.grad` and
# `w.requires_grad` are as before, `w` is unchanged, and the returned tensor does not require grad.

# %% nbgrader={"grade": false, "grade_id": "ex2-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def grad_of_mse(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    ### BEGIN SOLUTION
    w_leaf = w.detach().clone().requires_grad_(True)
    loss = ((x @ w_leaf - y) ** 2).mean()
    (grad,) = torch.autograd.grad(loss, w_leaf)
    return grad
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 2"):
    x, w, y = torch.randn(20, 3), torch.randn(3), torch.randn(20)
    by_hand = 2 / len(x) * x.T @ (x @ w - y)  # before the call: from the inputs as given
    grad = grad_of_mse(w, x, y)
    assert grad.shape == w.shape, f"the gradient has the shape of w, {tuple(w.shape)}"
    assert torch.allclose(grad, by_hand, atol=1e-5), "the gradient is wrong"
    assert not w.requires_grad, "w.requires_grad must stay False when it was False"
    leaf = torch.randn(3, requires_grad=True)
    values = leaf.detach().clone()
    grad = grad_of_mse(leaf, x, y)
    assert leaf.grad is None, "w.grad was left set: compute the gradient without touching w.grad"
    assert leaf.requires_grad and torch.equal(leaf.detach(), values), "w must be unchanged"
    assert not grad.requires_grad, "return a plain tensor (no graph attached)"
### BEGIN HIDDEN TESTS
x, y = torch.randn(9, 2), torch.randn(9)
w = torch.randn(2, requires_grad=True)
before, inputs = w.detach().clone(), (x.clone(), y.clone())
grad = grad_of_mse(w, x, y)
assert torch.equal(x, inputs[0]) and torch.equal(y, inputs[1]), "x and y must be unchanged"
assert torch.allclose(grad, 2 / 9 * inputs[0].T @ (inputs[0] @ before - inputs[1]), atol=1e-5), \
    "wrong gradient"
assert w.grad is None, "w.grad was left set: compute the gradient without touching w.grad"
assert w.requires_grad and torch.equal(w.detach(), before), "w must be unchanged"
assert not grad.requires_grad, "return a plain tensor (no graph attached)"
w.grad = torch.full((2,), 3.0)  # a gradient from elsewhere stays as it was
grad_of_mse(w, x, y)
assert torch.equal(w.grad, torch.full((2,), 3.0)), "w.grad must stay as it was"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 — Registering layers (§1.2 PyTorch的框架和特点) · 2 points · ★★☆ · ~15 min
# Write `TinyMLP(in_features, hidden_sizes, num_classes)`: an `nn.Linear` + `nn.ReLU` for each entry of
# `hidden_sizes` (a tuple, possibly empty), then a final `Linear` to `num_classes` logits. Its
# `forward(x)` maps `(B, in_features)` to `(B, num_classes)`. Every layer must be registered, so that
# `model.parameters()`, `model.to(...)` and `state_dict()` see it (a plain Python list hides them).

# %% nbgrader={"grade": false, "grade_id": "ex3-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
class TinyMLP(nn.Module):
    def __init__(self, in_features: int, hidden_sizes: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        ### BEGIN SOLUTION
        layers: list[nn.Module] = []
        for width in hidden_sizes:
            layers += [nn.Linear(in_features, width), nn.ReLU()]
            in_features = width
        layers.append(nn.Linear(in_features, num_classes))
        self.layers = nn.Sequential(*layers)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        return self.layers(x)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 3"):
    model = TinyMLP(8, (16, 4), 3)
    logits = model(torch.randn(5, 8))
    assert logits.shape == (5, 3), f"expected logits of shape (5, 3), got {tuple(logits.shape)}"
    expected = (8 * 16 + 16) + (16 * 4 + 4) + (4 * 3 + 3)
    assert count_parameters(model) == expected, \
        f"expected {expected} parameters, found {count_parameters(model)}: is every layer registered?"
    assert len(model.state_dict()) == 6, "state_dict must hold a weight and a bias per Linear"
    assert count_parameters(TinyMLP(5, (), 2)) == 5 * 2 + 2, "with no hidden layers it is one Linear(5, 2)"
    doubled = TinyMLP(8, (16, 4), 3).to(torch.float64)
    assert doubled(torch.randn(2, 8, dtype=torch.float64)).dtype == torch.float64, \
        "model.to(float64) must convert every layer"
### BEGIN HIDDEN TESTS
model = TinyMLP(6, (), 1)
assert count_parameters(model) == 6 + 1, "with no hidden layers it is one Linear(6, 1)"
model = TinyMLP(3, (7, 7, 7), 4).to(torch.float64)
assert model(torch.randn(2, 3, dtype=torch.float64)).dtype == torch.float64, \
    "model.to(float64) must convert every layer"
assert len(model.state_dict()) == 8, "state_dict must hold a weight and a bias per Linear"
assert sum(isinstance(m, nn.ReLU) for m in model.modules()) == 3, "one ReLU per hidden layer"
weights, x = list(model.state_dict().values()), torch.randn(2, 3, dtype=torch.float64)
expected = x
for i in range(0, len(weights), 2):  # the registered layers, in order, a ReLU after each hidden one
    expected = expected @ weights[i].T + weights[i + 1]
    expected = torch.relu(expected) if i + 2 < len(weights) else expected
assert torch.allclose(model(x), expected), "forward applies every registered layer in order"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 — A correct training loop (§1.1 深度学习的基本概念) · 3 points · ★★☆ · ~20 min
# Write `train_steps(model, images, labels, *, lr, num_steps)`: make one
# `torch.optim.SGD(model.parameters(), lr=lr)`, then take `num_steps` full-batch steps with
# `nn.CrossEntropyLoss()`, and return the loss of each step as a list of Python floats. Put the
# model in training mode. Each step must use only that step's gradient.

# %% nbgrader={"grade": false, "grade_id": "ex4-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_steps(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, *, lr: float,
                num_steps: int) -> list[float]:
    ### BEGIN SOLUTION
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    losses = []
    for _ in range(num_steps):
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
def _reference(model, images, labels, lr, num_steps):
    """The losses of a correct loop."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    out = []
    for _ in range(num_steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        out.append(loss.item())
    return out


with checks("Exercise 4"):
    torch.manual_seed(1)
    images = torch.randn(32, 2)
    labels = (images[:, 0] > 0).long()
    model = nn.Linear(2, 2)
    reference = nn.Linear(2, 2)
    reference.load_state_dict(model.state_dict())
    model.eval()
    losses = train_steps(model, images, labels, lr=0.5, num_steps=20)
    assert len(losses) == 20, f"expected 20 losses, got {len(losses)}"
    assert all(type(loss) is float for loss in losses), \
        "return Python floats (loss.item()); keeping tensors keeps every step's graph alive"
    assert losses[-1] < 0.5 * losses[0], f"the loss should fall: {losses[0]:.3f} -> {losses[-1]:.3f}"
    assert np.allclose(losses, _reference(reference, images, labels, 0.5, 20), atol=1e-6), \
        "losses differ from a correct loop: are gradients zeroed?"
    assert model.training, "put the model in training mode"
### BEGIN HIDDEN TESTS
torch.manual_seed(2)
images, labels = torch.randn(16, 4), torch.randint(0, 3, (16,))
mine = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.0), nn.Linear(8, 3))
ref = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.0), nn.Linear(8, 3))
ref.load_state_dict(mine.state_dict())
mine.eval()
got = train_steps(mine, images, labels, lr=0.1, num_steps=5)
want = _reference(ref, images, labels, 0.1, 5)
assert np.allclose(got, want, atol=1e-6), "losses differ from a correct loop: are gradients zeroed?"
for p, q in zip(mine.parameters(), ref.parameters(), strict=True):
    assert torch.allclose(p, q, atol=1e-6), "final weights differ from a correct loop"
assert mine.training, "put the model in training mode"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 — Evaluation that changes nothing (§1.1 深度学习的基本概念) · 2 points · ★★☆ · ~20 min
# Write `accuracy(model, images, labels, *, batch_size)`: the fraction of correctly classified
# samples, computed in batches of `batch_size` (the last batch may be smaller) under `torch.no_grad()`
# in evaluation mode. It must not change the model: BatchNorm statistics stay as they were, and the
# model is back in the mode (train or eval) it was in.

# %% nbgrader={"grade": false, "grade_id": "ex5-answer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, *,
             batch_size: int) -> float:
    ### BEGIN SOLUTION
    was_training = model.training
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            logits = model(images[start:start + batch_size])
            correct += (logits.argmax(dim=1) == labels[start:start + batch_size]).sum().item()
    model.train(was_training)
    return correct / len(images)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
with checks("Exercise 5"):
    torch.manual_seed(3)
    model = SmallCNN(num_classes=6, width=4)
    images, labels = torch.randn(12, 3, 16, 16), torch.randint(0, 6, (12,))
    model.eval()
    with torch.no_grad():
        expected = (model(images).argmax(dim=1) == labels).float().mean().item()
    model.train()
    stats = {k: v.clone() for k, v in model.state_dict().items()}
    got = accuracy(model, images, labels, batch_size=5)
    assert isinstance(got, float), f"return a float, got {type(got).__name__}"
    assert abs(got - expected) < 1e-6, \
        f"expected accuracy {expected:.4f}, got {got:.4f} (12 samples in batches of 5: average over samples)"
    assert model.training, "the model was in training mode and should be again"
    for name, value in model.state_dict().items():
        assert torch.equal(value, stats[name]), f"{name} changed: BatchNorm must not update here"
### BEGIN HIDDEN TESTS
torch.manual_seed(4)
model = SmallCNN(num_classes=2, width=4)
model(torch.randn(8, 3, 16, 16))  # give BatchNorm non-trivial running statistics
images, labels = torch.randn(10, 3, 16, 16), torch.randint(0, 2, (10,))
model.eval()
with torch.no_grad():
    hits = (model(images).argmax(dim=1) == labels)
expected = hits.float().mean().item()
stats = {k: v.clone() for k, v in model.state_dict().items()}
got = accuracy(model, images, labels, batch_size=4)
assert abs(got - expected) < 1e-6, \
    "with 10 samples in batches of 4, average over samples, not over batches"
assert not model.training, "the model was in eval mode and should stay there"
for name, value in model.state_dict().items():
    assert torch.equal(value, stats[name]), f"{name} changed: evaluate in eval mode, without steps"
model.train()
accuracy(model, images, labels, batch_size=3)
for name, value in model.state_dict().items():
    assert torch.equal(value, stats[name]), f"{name} changed: BatchNorm must not update here"
### END HIDDEN TESTS

# %% [markdown]
# ## Summary
# - Broadcasting replaces loops: `(x - x.mean(0)) / x.std(0, correction=0)` works column by column.
# - `torch.autograd.grad` returns a gradient without touching `.grad` fields.
# - Layers kept in `nn.Sequential` / `nn.ModuleList` are registered; a plain list hides them.
# - A training step is zero the gradients, forward, loss, backward, step; log `loss.item()`.
# - Evaluation: `model.eval()`, `torch.no_grad()`, count correct samples, restore the mode.
#
# ## Exercises
# Further practice, not graded: rewrite `train_steps` with `torch.optim.Adam` and compare the curves;
# give `TinyMLP` a `dropout` argument and check that `model.eval()` turns it off.
