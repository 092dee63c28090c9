"""Train SmallCNN on the shapes data with DistributedDataParallel, on 1 to N processes.

One process (CPU, or one GPU)::

    python -m common.ddp.train --num-epochs 3 --batch-size 64 --log-file runs/ddp/log.jsonl

Two processes on this machine (gloo on CPUs, NCCL on GPUs; --batch-size is the global batch)::

    torchrun --standalone --nproc_per_node=2 -m common.ddp.train --num-epochs 3 --batch-size 64 \
        --snapshot runs/ddp/snapshot.pt --save-final runs/ddp/model.pt --log-file runs/ddp/log.jsonl

Your own images (an ImageFolder root, or --train-csv/--train-images/--val-csv/--val-images)
and a torchvision model with random weights (docs/scripts.md, "Your own images")::

    python -m common.ddp.train --data DIR --model resnet18 --image-size 64

``python -m common.ddp.torchrun`` takes the same arguments as ``torchrun`` and ends a failed job
(a bad file every rank reads) in one line naming the file, without torchrun's own traceback.

Several machines (run on each; see chapters/04_slurm_ddp_train.sbatch)::

    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=node0:29500 \
        --rdzv-id=job42 -m common.ddp.train ...

Add ``--max-restarts=1`` to torchrun and ``--snapshot PATH`` here, and a crashed worker
group is restarted from the last snapshot; export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
first (see ``common.ddp.launch.RESTART_SAFE_ENV``; ``python -m common.ddp.torchrun`` sets it
itself when ``--max-restarts`` is above 0). This script's flags must not be
prefixes of torchrun's own (``--log`` would be read as ``--log-dir``), hence
``--log-file``. ``--tiny`` is the configuration the tests use; the settings are
``common.ddp.config.TrainConfig``. This module is the command line only: the trainer's
steps are the library ``common.ddp.trainer``, which ``common.ddp.bench`` runs too.
"""

from __future__ import annotations

from common.ddp.config import parse_config
from common.ddp.trainer import run_training


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.ddp.train`` and ``torchrun ... -m common.ddp.train``.

    Introduced in chapters/04_2_ddp_training.ipynb.
    """
    return run_training(parse_config(argv))


if __name__ == "__main__":
    raise SystemExit(main())
