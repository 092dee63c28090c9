"""The shard reader against webdataset, litdata and mosaicml-streaming: reader and decode apart.

    python -m common.shards.peers --out build/bench/peers                    # a few minutes
    python -m common.shards.peers --out build/bench/peers --python /tmp/peers/bin/python
    python -m common.shards.peers --out build/bench/peers --quick

Every reader streams the same JPEG bytes and labels (this course's tar shards, which webdataset
reads as they are; litdata's and mosaic's own formats written once from the same files), in one
process, without DataLoader workers (the reader's cost, not the parallelism). Each reader runs in
a process of its own (``litdata.optimize`` switches its whole process to the spawn start method,
and no peer's setting may change another's figures); the rounds interleave the readers. Per
reader, two passes per round: the reader alone (bytes and labels), then the reader with the same
decode (``torchvision.io.decode_jpeg`` to uint8, ``v2.Resize`` + ``v2.CenterCrop``) that every
reader gets; ``decode_only`` times that decode on bytes already in memory. The figures are
median CPU microseconds per sample (``time.process_time``: steadier than wall time on a busy
machine); ``digest`` hashes every decoded tensor (in any order), so equal digests mean the same
tensors. ``--python`` picks the interpreter of the peers (install them in a virtual environment
of their own: docs/scripts.md). Writes ``peers.csv`` and ``peers.json`` to ``--out``.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from common.cli import option, parse_dataclass_args, positive

READERS = ("shards", "webdataset", "litdata", "mosaic")
MODULES = {"shards": "common", "webdataset": "webdataset", "litdata": "litdata",
           "mosaic": "streaming"}


@dataclass
class PeersConfig:
    """What to measure.

    Introduced in docs/scripts.md ("The shard reader and its peers").
    """

    out: Path = option(Path("build/bench/peers"), "output folder (formats, CSV, JSON)")
    data_root: Path | None = option(None, "a generated shapes dataset (default: the repository's data)")
    num_images: int = option(640, "images per pass")
    image_size: int = option(64, "side of the decoded square")
    repeats: int = option(5, "interleaved rounds (the median is reported)")
    python: str = option("", "the interpreter that runs the readers (default: this one)")
    readers: tuple[str, ...] = option(READERS, "readers to time (those not installed are skipped)",
                                      nargs="+")
    child: str = option("", "internal: time one reader in this process")
    quick: bool = option(False, "tiny data, a few seconds (given flags still win)")


QUICK = {"num_images": 32, "repeats": 2, "image_size": 32}


def _samples(config: PeersConfig) -> list[tuple[str, int]]:
    from common.fast.timing import QUICK_DATA
    from common.synthetic import ShapesData, ensure_data

    if config.data_root is not None:
        data = ShapesData(Path(config.data_root))
    elif config.quick:
        data = ensure_data(config.out / "data" / "shapes", QUICK_DATA, verbose=False)
    else:
        data = ensure_data(verbose=False)
    table = pd.read_csv(data.labels_csv("train")).head(config.num_images)
    return [(str(data.images_dir("train") / name), int(label))
            for name, label in zip(table.iloc[:, 0], table.iloc[:, 1], strict=True)]


class Decode:
    """The one decode every reader gets: JPEG bytes -> uint8 ``(3, size, size)``."""

    def __init__(self, size: int) -> None:
        import torch
        from torchvision.transforms import v2

        self.geometry = v2.Compose([v2.Resize(size, antialias=True), v2.CenterCrop(size)])
        self.torch = torch

    def __call__(self, data: bytes):
        from common.fast.pipeline import decode_tensor

        return self.geometry(decode_tensor(self.torch.frombuffer(bytearray(data),
                                                                 dtype=self.torch.uint8), jpeg=True))


def _litdata_item(pair: tuple[str, int]) -> dict:
    path, label = pair
    return {"image": Path(path).read_bytes(), "label": label}


def reader(name: str, config: PeersConfig, samples: list[tuple[str, int]]):
    """A function that streams ``(jpeg bytes, label)`` of every sample once, in ``name``'s format
    (written on first use under ``--out``)."""
    root = config.out / name
    if name == "shards":
        from common.shards import ShardedImageDataset, ensure_shards

        manifest = ensure_shards(samples, root, shard_size=64)

        def stream() -> Iterator[tuple[bytes, int]]:
            dataset = ShardedImageDataset(manifest, shuffle=False, equalize="none", verify=False)
            return ((record.data, record.label) for record in dataset.records())
        return stream
    if name == "webdataset":
        import webdataset as wds

        from common.shards import ensure_shards, read_manifest

        urls = [str(s.path) for s in read_manifest(ensure_shards(samples, config.out / "shards",
                                                                 shard_size=64))]

        def stream() -> Iterator[tuple[bytes, int]]:
            pipeline = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
            return ((jpg, int(cls)) for jpg, cls in pipeline.to_tuple("jpg", "cls"))
        return stream
    if name == "litdata":
        import litdata

        if not (root / "index.json").is_file():
            litdata.optimize(fn=_litdata_item, inputs=samples, output_dir=str(root),
                             chunk_bytes="16MB", num_workers=1)

        def stream() -> Iterator[tuple[bytes, int]]:
            dataset = litdata.StreamingDataset(str(root), shuffle=False)
            return ((item["image"], int(item["label"])) for item in dataset)
        return stream
    if name == "mosaic":
        from streaming import MDSWriter, StreamingDataset

        if not (root / "index.json").is_file():
            with MDSWriter(out=str(root), columns={"image": "bytes", "label": "int"}) as writer:
                for path, label in samples:
                    writer.write({"image": Path(path).read_bytes(), "label": label})

        def stream() -> Iterator[tuple[bytes, int]]:
            dataset = StreamingDataset(local=str(root), shuffle=False, batch_size=1)
            return ((item["image"], int(item["label"])) for item in dataset)
        return stream
    raise ValueError(f"unknown reader {name!r}")


def _digest(tensor) -> str:
    return hashlib.sha256(tensor.numpy().tobytes()).hexdigest()


def child(config: PeersConfig) -> dict:
    """One round of one reader, in this process: CPU µs per sample of each pass, and the digest."""
    import torch

    torch.set_num_threads(1)
    samples = _samples(config)
    decode = Decode(config.image_size)
    if config.child == "decode_only":
        data = [(Path(path).read_bytes(), label) for path, label in samples]
        stream = lambda: iter(data)  # noqa: E731  (bytes already in memory: no reader)
    else:
        stream = reader(config.child, config, samples)
    for _pair in stream():  # warm-up: files in the page cache, lazy imports done
        pass
    start = time.process_time()
    count = sum(1 for _pair in stream())
    read = (time.process_time() - start) / count
    start = time.process_time()
    digests = sorted(_digest(decode(data)) + str(label) for data, label in stream())
    both = (time.process_time() - start) / len(digests)
    return {"reader": config.child, "samples": count, "read_us": read * 1e6,
            "read_decode_us": both * 1e6,
            "digest": hashlib.sha256("".join(digests).encode()).hexdigest()[:16]}


def installed(python: str, name: str) -> bool:
    """Whether ``python`` can import the reader's module."""
    probe = [python, "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec("
             f"{MODULES[name]!r}) is None)"]
    return subprocess.run(probe, capture_output=True, cwd=Path.cwd()).returncode == 0


def run(config: PeersConfig) -> pd.DataFrame:
    """Interleaved rounds, each reader in a fresh process of its own; medians."""
    python = config.python or sys.executable
    names = [name for name in config.readers if installed(python, name)] + ["decode_only"]
    skipped = [name for name in config.readers if name not in names]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    argv = ["--out", str(config.out), "--num-images", str(config.num_images), "--image-size",
            str(config.image_size)] + (["--data-root", str(config.data_root)] if config.data_root
                                       else []) + (["--quick"] if config.quick else [])
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    for _round in range(config.repeats):
        for name in names:
            done = subprocess.run([python, "-m", "common.shards.peers", *argv, "--child", name],
                                  capture_output=True, text=True, env=env, timeout=1800)
            if done.returncode:
                raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
            rounds[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = []
    for name, results in rounds.items():
        read = statistics.median(r["read_us"] for r in results)
        both = statistics.median(r["read_decode_us"] for r in results)
        rows.append({"reader": name, "reader_us": 0.0 if name == "decode_only" else read,
                     "reader_and_decode_us": both,
                     "decode_us": both - (0.0 if name == "decode_only" else read),
                     "samples": results[0]["samples"], "digest": results[0]["digest"]})
    table = pd.DataFrame(rows)
    ours = table.set_index("reader").loc["shards"]
    table["reader_vs_shards"] = table["reader_us"] / ours["reader_us"]
    table["total_vs_shards"] = table["reader_and_decode_us"] / ours["reader_and_decode_us"]
    table.attrs["skipped"] = skipped
    table.attrs["rounds"] = rounds
    return table


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m common.shards.peers``."""
    config = parse_dataclass_args(PeersConfig, argv, description=__doc__.splitlines()[0],
                                  presets={"quick": QUICK},
                                  validate=lambda c: positive(c, "num_images", "image_size",
                                                              "repeats"))
    config.out.mkdir(parents=True, exist_ok=True)
    if config.child:
        print(json.dumps(child(config)))
        return 0
    table = run(config)
    table.to_csv(config.out / "peers.csv", index=False, float_format="%.2f")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    (config.out / "peers.json").write_text(json.dumps(
        {"config": {**asdict(config), "out": str(config.out), "data_root": str(config.data_root)},
         "machine": {"cores": os.cpu_count(), "load_average_1min": load},
         "skipped": table.attrs["skipped"], "rounds": table.attrs["rounds"]}, indent=1))
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    print(f"CPU µs per sample, medians of {config.repeats} interleaved rounds, each reader in a "
          f"process of its own, 1 thread; load average {load} on {os.cpu_count()} cores")
    if table.attrs["skipped"]:
        print("not installed for", config.python or sys.executable, ":",
              ", ".join(table.attrs["skipped"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
