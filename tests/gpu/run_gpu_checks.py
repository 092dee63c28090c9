"""The GPU checks in one short run: GPU-only chapter cells, multi-process chapters, benchmarks.

    python tests/gpu/run_gpu_checks.py --list                 # the plan; runs nothing
    python tests/gpu/run_gpu_checks.py --out "$OUT/gpu"       # everything, < 8 min on one GPU
    python tests/gpu/run_gpu_checks.py --out build/gpu --only gpu,bench-ddp

For a session that has a CUDA machine (none of the 2-core CPU machines this project is built
on has one). Each step runs in its own process with a time limit taken from one overall
budget (``--budget``, 450 s by default), in order of importance; a step that fails or runs out
of time is recorded as such and the next one starts. Steps: the GPU's name and capabilities;
``common.fast.benchmark`` (images/s of every pipeline); ``common.ddp.bench`` with one rank per
GPU (samples/s, data-wait fraction); chapters 06_1 (bf16 ``MixedPrecisionPolicy``), 03_1 (the
GPU section: pinned memory and ``non_blocking`` copies), 04_1 and 04_2 (torchrun, NCCL) run top
to bottom (executed copies in ``<out>/notebooks/``, the chapters themselves untouched); and
``common.fsdp.bench``. Writes ``<out>/gpu_report.md`` (one table of figures, one of steps) and
``<out>/<step>.json``. Without CUDA it runs nothing, says so, and exits with status 3.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = {"nb-06_1": "06_1_fsdp_sharding", "nb-03_1": "03_1_efficient_pipelines",
             "nb-04_1": "04_1_ddp_fundamentals", "nb-04_2": "04_2_ddp_training"}
#: (step, seconds at most, what it does), in the order run.
PLAN = [("gpu", 60, "GPU name, count, memory, torch/CUDA versions, bf16 support"),
        ("bench-fast", 150, "python -m common.fast.benchmark --num-workers 0 4 8: images/s"),
        ("bench-ddp", 150, "python -m common.ddp.bench --ranks <GPUs>: samples/s, data wait"),
        ("nb-06_1", 120, "chapters/06_1_fsdp_sharding.ipynb (bf16 cell)"),
        ("nb-03_1", 150, "chapters/03_1_efficient_pipelines.ipynb (GPU section)"),
        ("nb-04_1", 180, "chapters/04_1_ddp_fundamentals.ipynb (torchrun, NCCL)"),
        ("nb-04_2", 180, "chapters/04_2_ddp_training.ipynb (torchrun on every GPU)"),
        ("bench-fsdp", 90, "python -m common.fsdp.bench --ranks <GPUs>: FSDP vs DDP")]
EXIT_NO_GPU = 3


def step_gpu(out: Path) -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"gpu": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
            "memory_gib": round(props.total_memory / 2**30, 1), "torch": torch.__version__,
            "cuda": torch.version.cuda, "bf16": torch.cuda.is_bf16_supported()}


def step_bench_fast(out: Path) -> dict:
    import pandas as pd

    subprocess.run([sys.executable, "-m", "common.fast.benchmark", "--out", str(out / "bench"),
                    "--num-workers", "0", "4", "8", "--repeats", "3", "--no-progress"],
                   check=True, cwd=REPO)
    table = pd.read_csv(out / "bench" / "benchmark.csv")
    return {"pipelines": table.to_dict(orient="records")}


def step_bench_ddp(out: Path) -> dict:
    import pandas as pd
    import torch

    from common.ddp.bench import benchmark, setups, steps_within_epoch, summarize
    from common.synthetic import ensure_data

    data = ensure_data(verbose=False)
    runs = setups(32, torch.cuda.device_count())
    steps = steps_within_epoch(len(pd.read_csv(data.labels_csv("train"))), runs, 25)
    table = summarize(runs, benchmark(runs, repeats=3, steps=steps))
    return {"setups": table.to_dict(orient="records")}


def step_bench_fsdp(out: Path) -> dict:
    import torch

    from common.fsdp.bench import BenchConfig, compare

    return {"table": compare(BenchConfig(ranks=torch.cuda.device_count()))}


def step_notebook(out: Path, stem: str) -> dict:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "chapters" / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    try:
        NotebookClient(nb, timeout=170, kernel_name="python3",
                       resources={"metadata": {"path": str(REPO / "chapters")}}).execute()
    finally:
        (out / "notebooks").mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out / "notebooks" / f"{stem}.ipynb")
    lines = [line for cell in nb.cells for output in cell.get("outputs", [])
             if output.get("output_type") == "stream" for line in output["text"].splitlines()
             if any(word in line for word in ("GPU", "CUDA", "cuda", "bf16", "NCCL", "nccl"))]
    return {"gpu_lines": lines[:12]}


def run_step(name: str, out: Path) -> dict:
    """Run one step in this process (the child's side of ``--step``)."""
    if name in NOTEBOOKS:
        return step_notebook(out, NOTEBOOKS[name])
    return {"gpu": step_gpu, "bench-fast": step_bench_fast, "bench-ddp": step_bench_ddp,
            "bench-fsdp": step_bench_fsdp}[name](out)


def _figures(results: dict[str, dict]) -> list[tuple[str, str]]:
    rows = []
    if "gpu" in results:
        g = results["gpu"]
        rows.append(("GPU", f"{g['count']} x {g['gpu']} ({g['memory_gib']} GiB), torch "
                            f"{g['torch']}, CUDA {g['cuda']}, bf16 {g['bf16']}"))
    for row in results.get("bench-fast", {}).get("pipelines", []):
        rows.append((f"images/s: {row['pipeline']}, {row['num_workers']} workers",
                     f"{row['images_per_s']:,.0f} ({row['speedup_vs_guide']:.1f}x the guide)"))
    for row in results.get("bench-ddp", {}).get("setups", []):
        rows.append((f"DDP samples/s: {row['setup']}", f"{row['samples_per_s']:,.1f} "
                     f"(data-wait fraction {row['data_wait_fraction']:.2f})"))
    for name, row in results.get("bench-fsdp", {}).get("table", {}).items():
        rows.append((f"FSDP bench: {name}", f"{row['samples_per_s']:,.3g} samples/s, "
                     f"{row['bytes_per_rank']:,.3g} bytes/rank"))
    for step, stem in NOTEBOOKS.items():
        for line in results.get(step, {}).get("gpu_lines", [])[:3]:
            rows.append((f"{stem}", line.strip().replace("|", "/")))
    return rows


def report(results: dict[str, dict], status: list[tuple[str, str, float]]) -> str:
    """The markdown written to ``gpu_report.md``: figures, then one line per step."""
    lines = ["# GPU checks", "", "| figure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in _figures(results)]
    lines += ["", "| step | status | seconds |", "|---|---|---|"]
    lines += [f"| {name} | {state} | {seconds:.0f} |" for name, state, seconds in status]
    return "\n".join(lines) + "\n"


def run_plan(out: Path, steps: list[str], budget: float) -> int:
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + budget
    results, status = {}, []
    for name, limit, _ in [p for p in PLAN if p[0] in steps]:
        left = deadline - time.monotonic()
        if left < 20:
            status.append((name, "skipped: out of budget", 0.0))
            continue
        start = time.monotonic()
        try:
            done = subprocess.run([sys.executable, __file__, "--step", name, "--out", str(out)],
                                  timeout=min(limit, left), cwd=REPO)
            state = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
        except subprocess.TimeoutExpired:
            state = f"timed out after {min(limit, left):.0f} s"
        if (out / f"{name}.json").is_file() and state == "ok":
            results[name] = json.loads((out / f"{name}.json").read_text())
        status.append((name, state, time.monotonic() - start))
        print(f"[gpu-checks] {name}: {state} ({time.monotonic() - start:.0f} s)", flush=True)
    (out / "gpu_report.md").write_text(report(results, status))
    print(f"wrote {out / 'gpu_report.md'}")
    return 0 if all(state == "ok" for _, state, _ in status) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "gpu",
                        help="output folder (default: build/gpu)")
    parser.add_argument("--list", action="store_true", help="print the plan and exit")
    parser.add_argument("--only", default="", help="comma-separated steps (default: all)")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all steps")
    parser.add_argument("--step", default="", help=argparse.SUPPRESS)  # the child's side
    args = parser.parse_args(argv)
    names = [name for name, _, _ in PLAN]
    steps = [s for s in args.only.split(",") if s] or names
    if unknown := sorted(set(steps) - set(names)):
        parser.error(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(names)}")
    if args.step:
        (args.out / f"{args.step}.json").write_text(json.dumps(run_step(args.step, args.out),
                                                               indent=1, default=str))
        return 0
    if args.list:
        for name, limit, what in PLAN:
            print(f"{name:11} {limit:4d} s at most  {what}{'' if name in steps else '  (not selected)'}")
        print(f"overall budget {args.budget:.0f} s; report: {args.out / 'gpu_report.md'}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("GPU checks skipped: torch.cuda.is_available() is False on this machine "
              "(nothing was run; --list shows the plan)")
        return EXIT_NO_GPU
    return run_plan(args.out, steps, args.budget)


if __name__ == "__main__":
    raise SystemExit(main())
