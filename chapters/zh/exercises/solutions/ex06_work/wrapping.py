"""按参数量划分单元的 FSDP2 包装策略：练习 8 的答案文件。"""

from torch import nn
from torch.distributed.fsdp import fully_shard


def shard(model: nn.Module, *, min_params: int) -> list[str]:
    """从子模块到父模块依次检查：尚未归入单元的参数达到 ``min_params`` 个，就把这个子模块做成一个单元；
    最后是根模块。返回各个单元的名字。"""
    ### BEGIN SOLUTION
    taken, units = set(), []  # 在原始模型上规划：fully_shard 会替换参数
    for name, module in reversed(list(model.named_modules())[1:]):  # 每个模块都排在它的子模块之后
        pending = [p for p in module.parameters() if id(p) not in taken]
        if sum(p.numel() for p in pending) >= min_params:
            taken.update(id(p) for p in pending)
            units.append(name)
    for name in units:  # 按规划的顺序，先子模块后父模块
        fully_shard(model.get_submodule(name))
    fully_shard(model)
    return units
    ### END SOLUTION
