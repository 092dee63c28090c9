import torch
from torch import nn

layer = nn.Linear(16, 16)


def step_with_branch(x: torch.Tensor) -> torch.Tensor:
    y = layer(x)
    if y.sum().item() > 0:  # Python needs the value here
        y = y * 2
    return y.relu()


compiled = torch.compile(step_with_branch)
compiled(torch.randn(8, 16))
