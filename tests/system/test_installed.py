"""Chapters run from an installed wheel, in an empty folder, as a learner outside a checkout would.

The wheel of this repository is built offline and installed into a fresh virtual environment
outside the checkout. To spare a two-minute torch install, that environment reaches the
dependencies in ``.venv`` through a ``.pth`` line naming its site-packages folder (a plain path
line: the ``.pth`` files there, among them the editable install of ``common``, are not
processed). Chapters 01, 02_1 and 04_1 are copied into an empty folder and run top to bottom
by a kernel of the new interpreter, with ``HOME`` in ``tmp_path`` (so the data is looked for
under ``~/.cache/torch-pipelines-companion`` there; the test puts a copy of the checkout's
``data/shapes`` there first, since generating it costs ten CPU seconds that the console-script test
already spends on a small set from the same installed code), under the network guard of ``make test``
and a write guard (tests/writeguard) that logs any write into the checkout from any process.
This is those chapters' run in ``make test`` (the Makefile's ``WHEEL_CHAPTERS`` leaves them out of
nbval), so cells marked ``# NBVAL_CHECK_OUTPUT`` must print what they stored, as under nbval.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from tests.notebook_parameters import apply_parameters

REPO = Path(__file__).resolve().parents[2]
CHAPTERS = ["01_pytorch_basics", "02_1_dataset_dataloader", "04_1_ddp_fundamentals"]
#: What a wheel is built from (the build writes build/ and *.egg-info beside its sources).
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "common", "course"]
KERNEL = "companion-wheel"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _build_wheel(out: Path) -> Path:
    source = out / "source"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        kwargs = {"ignore": shutil.ignore_patterns("__pycache__")} if (REPO / name).is_dir() else {}
        copy(REPO / name, source / name, **kwargs)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "--quiet", "--wheel-dir", str(out / "wheels"), str(source)],
                   check=True, capture_output=True, text=True)
    (wheel,) = (out / "wheels").glob("torch_pipelines_companion-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv with the wheel installed and .venv's dependencies reachable."""
    root = tmp_path_factory.mktemp("installed")
    wheel = _build_wheel(root)
    venv.EnvBuilder(with_pip=False).create(root / "venv")
    python = root / "venv" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                    "--no-index", "--quiet", str(wheel)], check=True, capture_output=True,
                   text=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_path('purelib'))"], check=True,
                               capture_output=True, text=True).stdout.strip())
    (site / "companion_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    shutil.copy2(REPO / "tests" / "writeguard" / "companion_writeguard.py", site)
    (site / "companion_writeguard.pth").write_text("import companion_writeguard\n")
    return python


def _env(tmp_path: Path, guard_root: Path) -> dict[str, str]:
    """The kernel's environment: `make test`'s guards and thread count, HOME in tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPANION_", "JPY_"))
           and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "MPLBACKEND")}
    (tmp_path / "home").mkdir(exist_ok=True)
    env |= {"HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO / "tests" / "netguard"), "PYTHONDONTWRITEBYTECODE": "1",
            "COMPANION_NETGUARD_LOG": str(tmp_path / "netguard.log"),
            "COMPANION_WRITEGUARD_ROOT": str(guard_root),
            "COMPANION_WRITEGUARD_LOG": str(tmp_path / "writeguard.log")}
    env.pop("XDG_CACHE_HOME", None)
    return env


def _checked_outputs(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """The text outputs of the cells nbval would compare (tagged ``nbval-check-output``)."""
    return [(i, "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                        for o in cell.get("outputs", [])))
            for i, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and "nbval-check-output" in cell.metadata.get("tags", [])]


def test_the_wheel_is_what_the_new_venv_imports(installed, tmp_path):
    probe = ("import json, common, course, common.paths, importlib.metadata as m; "
             "print(json.dumps([common.__file__, course.__file__, "
             "str(common.paths.find_repo_root()), str(common.paths.default_data_root()), "
             "m.metadata('torch-pipelines-companion').get_all('Project-URL')]))")
    done = subprocess.run([str(installed), "-c", probe], cwd=tmp_path, check=True, text=True,
                          capture_output=True, env=_env(tmp_path, REPO))
    common_file, course_file, repo, data, urls = json.loads(done.stdout)
    venv_root = installed.parent.parent
    assert Path(common_file).is_relative_to(venv_root), common_file
    assert Path(course_file).is_relative_to(venv_root), course_file
    assert repo == "None", "the installed package must not find the checkout"
    assert data == str(tmp_path / "home" / ".cache" / "torch-pipelines-companion")
    assert any(u.startswith("Repository, https://github.com/") for u in urls or []), urls


def test_the_console_scripts_and_the_write_guard_work(installed, tmp_path):
    bin_dir = installed.parent
    env = _env(tmp_path, tmp_path / "guarded")
    done = subprocess.run([str(bin_dir / "companion-make-data"), "--root", str(tmp_path / "d"),
                           "--num-train", "12", "--num-val", "6", "--min-size", "32",
                           "--max-size", "48"], check=True, text=True, capture_output=True,
                          env=env)
    assert "12 train + 6 val" in done.stdout
    subprocess.run([str(bin_dir / "companion-make-shards"), "--csv",
                    str(tmp_path / "d" / "val" / "labels.csv"), "--images",
                    str(tmp_path / "d" / "val" / "images"), "--out", str(tmp_path / "s"),
                    "--shard-size", "4"], check=True, text=True, capture_output=True, env=env)
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["num_samples"] == 6
    assert not (tmp_path / "writeguard.log").exists()
    # The guard itself: a write into the guarded folder is logged (here a stand-in folder).
    subprocess.run([str(installed), "-c", f"import os; os.makedirs({str(tmp_path / 'guarded')!r}); "
                    f"open({str(tmp_path / 'guarded' / 'x.txt')!r}, 'w').close()"],
                   check=True, env=env)
    logged = (tmp_path / "writeguard.log").read_text()
    assert "os.mkdir" in logged and "open" in logged and "x.txt" in logged


def _kernel(tmp_path: Path, python: Path) -> KernelManager:
    spec = tmp_path / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "companion wheel", "language": "python"}))
    return KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(
        kernel_dirs=[str(tmp_path / "kernels")]))


#: Appended to each copy: where the kernel found `common`, the checkout, the data.
PROBE = ("import common, common.paths\n"
         "print(common.__file__, common.paths.find_repo_root(), common.paths.default_data_root(),"
         " sep='\\n')")


def test_chapters_run_from_the_installed_package_in_an_empty_folder(installed, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for stem in CHAPTERS:
        shutil.copy2(REPO / "chapters" / f"{stem}.ipynb", work)
    shutil.copytree(REPO / "chapters" / "scripts", work / "scripts")  # the scripts the chapters run
    env = _env(tmp_path, REPO)
    cache = tmp_path / "home" / ".cache" / "torch-pipelines-companion"
    if (REPO / "data" / "shapes" / "manifest.json").is_file():  # `make test` made it
        shutil.copytree(REPO / "data" / "shapes", cache / "shapes")
    timings = {}
    for stem in CHAPTERS:
        nb = apply_parameters(nbformat.read(work / f"{stem}.ipynb", as_version=4), stem)
        stored = _checked_outputs(nb)
        nb.cells.append(nbformat.v4.new_code_cell(PROBE))
        start, kernel = time.perf_counter(), _kernel(tmp_path / stem, installed)
        try:
            NotebookClient(nb, km=kernel, timeout=300,
                           resources={"metadata": {"path": str(work)}}).execute(env=env)
        finally:  # nbclient shuts down only the kernels it made itself
            if kernel.has_kernel:
                kernel.shutdown_kernel(now=True)
        timings[stem] = time.perf_counter() - start
        assert _checked_outputs(nb) == stored, f"{stem}: a cell tagged nbval-check-output printed otherwise"
        common_file, repo, data = nb.cells[-1].outputs[0]["text"].split()
        assert Path(common_file).is_relative_to(installed.parent.parent), common_file
        assert repo == "None" and data == str(tmp_path / "home" / ".cache" /
                                             "torch-pipelines-companion")
    print("seconds per chapter:", {k: round(v) for k, v in timings.items()})
    assert (cache / "shapes" / "manifest.json").is_file(), "the data is in the per-user cache"
    assert (tmp_path / "runs" / "04_1").is_dir(), "chapters write ../runs beside their folder"
    guard = tmp_path / "writeguard.log"
    assert not guard.exists(), f"written into the checkout:\n{guard.read_text()}"
    net = tmp_path / "netguard.log"
    assert not net.exists() or not net.read_text().strip(), net.read_text()
