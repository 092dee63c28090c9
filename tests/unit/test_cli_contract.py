"""One command-line contract for every entry point, driven in this process with bad values.

Each case runs ``main(argv)`` of an entry point and expects a refusal: exit status 2 (an
argparse error naming the flag) or 1 (a one-line error naming the flag or the file), the flag
or file named on stderr, and no traceback. Nothing is trained: every value is refused before a
process group or a worker exists, most before a model does (a snapshot is read after the model is
built). ``FOUND_BY_AUDIT`` lists the values the issue-30 audit found let through (some of them trained a tiny
run), each with the file its fix went into.
tests/system/test_cli_contract_processes.py runs a few cases as real commands, and
``course.publishing.notebooks`` (jupytext starts pandoc on import).
"""

from __future__ import annotations

import importlib
import json
import math
import shutil
from pathlib import Path

import pytest

from common.cli import (
    at_least,
    distinct_files,
    file_name_part,
    finite,
    in_range,
    is_dir,
    is_dir_or_absent,
    is_file,
    is_file_or_absent,
)
from common.shards.format import write_shards

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def places(tmp_path_factory, tiny_data) -> dict[str, str]:
    """A regular file, an empty folder, a missing path, tiny data and tiny shards."""
    root = tmp_path_factory.mktemp("cli")
    (root / "file.txt").write_text("not a folder, not a manifest\n")
    (root / "folder").mkdir()
    (root / "notes.txt").write_text("a note, not a snapshot\n")  # torch.load: an IndexError
    samples = [(tiny_data.images_dir("train") / name, label) for name, label in
               (line.split(",") for line in
                tiny_data.labels_csv("train").read_text().splitlines()[1:])]
    samples = [(path, int(label)) for path, label in samples]
    write_shards(samples, root / "shards", shard_size=8, classes=tiny_data.classes)
    write_shards(samples, root / "bare", shard_size=8)  # a manifest without class names
    (root / "cached").mkdir()
    (root / "cached" / "cache").write_text("a file where the cache folder goes\n")
    (root / "site").mkdir()
    (root / "site-src" / "en").mkdir(parents=True)
    (root / "site-src" / "en" / "mine.txt").write_text("the user's own notes\n")
    (root / "ex").mkdir()
    shutil.copy(sorted((REPO / "chapters" / "exercises" / "solutions").glob("ex[0-9][0-9]_*.ipynb"))[0],
                root / "ex")  # instructor sources of one exercise
    (root / "subs" / "alice").mkdir(parents=True)  # one student, nothing submitted yet
    return {"file": str(root / "file.txt"), "dir": str(root / "folder"),
            "missing": str(root / "missing" / "x"), "data": str(tiny_data.root),
            "shards": str(root / "shards"), "bare": str(root / "bare"),
            "cached": str(root / "cached"), "site": str(root / "site"),
            "user_file": str(root / "site-src" / "en" / "mine.txt"),
            "same": str(root / "same.pt"), "ex": str(root / "ex"), "root": str(root),
            "subs": str(root / "subs"), "notes": str(root / "notes.txt")}


def _program(module: str):
    """What ``python -m module`` runs: the module, or a package's ``__main__``."""
    imported = importlib.import_module(module)
    return importlib.import_module(f"{module}.__main__") if hasattr(imported, "__path__") else imported


def _run(module: str, argv: list[str], capsys) -> tuple[int, str]:
    main = _program(module).main
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    return code, capsys.readouterr().err


DDP, FSDP, SHARDS = "common.ddp.train", "common.fsdp.train", "common.shards.train"
TRAINER_CASES = [  # (argv after --tiny, the flag stderr must name)
    (["--lr", "nan"], "--lr"), (["--lr", "inf"], "--lr"), (["--lr", "-1"], "--lr"),
    (["--momentum", "nan"], "--momentum"), (["--momentum", "1e9"], "--momentum"), (["--weight-decay", "inf"], "--weight-decay"),
    (["--image-size", "4"], "--image-size"), (["--step-delay", "inf"], "--step-delay"),
    (["--threads", "-1"], "--threads"), (["--num-workers", "-1"], "--num-workers"),
    (["--data", "{file}"], "--data"), (["--data", "{missing}"], "--data"),
    (["--save-final", "{dir}"], "--save-final"), (["--log-file", "{dir}"], "--log-file"),
    (["--save-final", "{same}", "--log-file", "{same}"], "--log-file"),
    (["--optimizer", "bogus"], "--optimizer"),
]
CASES = [  # (module, argv, exit status, what stderr must name)
    *[(DDP, ["--tiny", *argv], 2, flag) for argv, flag in TRAINER_CASES],
    (DDP, ["--tiny", "--snapshot", "{dir}"], 2, "--snapshot"),
    (DDP, ["--tiny", "--snapshot", "{same}", "--save-final", "{same}"], 2, "--save-final"),
    (DDP, ["--tiny", "--snapshot", "{file}/x.pt"], 2, "--snapshot"),
    (DDP, ["--tiny", "--data", "{data}", "--snapshot", "{notes}"], 2,  # was an IndexError
     "notes.txt is truncated or not a PyTorch file"),
    (DDP, ["--tiny", "--log-file", "{root}/nest", "--snapshot", "{root}/nest/s.pt"], 2,
     "are inside one another"),  # was a FileExistsError after training
    *[(FSDP, ["--tiny", *argv], 2, flag) for argv, flag in TRAINER_CASES],
    (FSDP, ["--tiny", "--checkpoint", "{file}"], 2, "--checkpoint"),
    (FSDP, ["--tiny", "--keep", "0"], 2, "--keep"),
    (SHARDS, ["--tiny", "--shards", "{shards}", "--val-shards", "{shards}", "--num-classes", "2"],
     1, "--num-classes"),
    (SHARDS, ["--tiny", "--shards", "{file}", "--val-shards", "{shards}"], 1, "--shards"),
    (SHARDS, ["--tiny", "--shards", "{shards}", "--val-shards", "{missing}"], 1, "--val-shards"),
    (SHARDS, ["--tiny", "--shards", "{dir}"], 1, "--shards"),
    (SHARDS, ["--tiny", "--image-size", "4"], 2, "--image-size"),
    (SHARDS, ["--tiny", "--num-workers", "-1"], 2, "--num-workers"),
    (SHARDS, ["--tiny", "--lr", "nan"], 2, "--lr"),
    (SHARDS, ["--tiny", "--num-classes", "0"], 2, "--num-classes"),
    (SHARDS, ["--tiny", "--out", "{dir}"], 2, "--out"),
    (SHARDS, ["--tiny", "--snapshot", "{same}", "--out", "{same}"], 2, "--out"),
    (SHARDS, ["--tiny", "--shards", "{shards}", "--val-shards", "{shards}", "--snapshot",
              "{notes}"], 1, "notes.txt is truncated or not a PyTorch file"),  # an IndexError
    *[("common.fast.benchmark", ["--quick", *argv], 2, flag) for argv, flag in [
        (["--max-images", "-1"], "--max-images"), (["--min-seconds", "-1"], "--min-seconds"),
        (["--min-seconds", "nan"], "--min-seconds"), (["--crop-size", "0"], "--crop-size"),
        (["--threads", "-1"], "--threads"), (["--threads", "0"], "--threads"),
        (["--resize-size", "8", "--crop-size", "16"], "--crop-size"),
        (["--num-workers", "0", "-1"], "--num-workers"),
        (["--formulations", "bogus"], "--formulations"), (["--out", "{file}"], "--out"),
        (["--data-root", "{file}"], "--data-root"), (["--data-root", "{missing}"], "--data-root"),
        (["--data-root", "{dir}"], "--data-root")]],
    ("common.fast.benchmark", ["--quick", "--data-root", "{data}", "--out", "{cached}",
                               "--no-progress"], 1, "cache"),
    *[("common.shards.bench", ["--quick", *argv], 2, flag) for argv, flag in [
        (["--max-images", "-1"], "--max-images"), (["--min-seconds", "-1"], "--min-seconds"),
        (["--threads", "-1"], "--threads"), (["--num-workers", "-1"], "--num-workers"),
        (["--shard-size", "0"], "--shard-size"), (["--out", "{file}"], "--out"),
        (["--data-root", "{dir}"], "--data-root")]],
    ("common.ddp.bench", ["--data", "{file}"], 2, "--data"),
    ("common.ddp.bench", ["--ranks", "0"], 2, "--ranks"),
    ("common.fsdp.bench", ["--image-size", "4"], 2, "--image-size"),
    ("common.fsdp.bench", ["--batch-size", "5", "--ranks", "2"], 2, "--batch-size"),
    ("common.ddp.bench", ["--steps", "2"], 2, "--steps"),  # no timed step: a KeyError
    ("common.fsdp.bench", ["--steps", "2"], 2, "--steps"),  # likewise
    ("common.ddp.bench", ["--data", "{data}", "--per-rank-batch", "32"], 1,  # was a ValueError
     "--per-rank-batch"),
    ("common.ddp.collectives_demo", ["--ranks", "2"], 2, "--ranks"),
    ("common.tools.doctor", ["--fix"], 2, "--fix"),
    *[("common.tools.make_data", argv, 2, flag) for argv, flag in [
        (["--jpeg-quality", "0"], "--jpeg-quality"), (["--jpeg-quality", "1000"], "--jpeg-quality"),
        (["--min-size", "2", "--max-size", "3"], "--min-size"),
        (["--min-size", "64", "--max-size", "32"], "--max-size"),
        (["--num-val", "0"], "--num-val"), (["--root", "{file}"], "--root"),
        (["--root", "{file}/shapes"], "--root")]],
    *[("common.shards.make", argv, 2, flag) for argv, flag in [
        (["--prefix", "../escaped", "--out", "{dir}"], "--prefix"),
        (["--prefix", "a/b", "--out", "{dir}"], "--prefix"), (["--prefix", ""], "--prefix"),
        (["--out", "{file}"], "--out"), (["--shard-size", "0"], "--shard-size"),
        (["--csv", "{missing}", "--images", "{dir}", "--out", "{dir}"], "--csv"),
        (["--csv", "{dir}", "--images", "{dir}", "--out", "{dir}"], "--csv"),
        (["--csv", "{file}", "--images", "{file}", "--out", "{dir}"], "--images")]],
    ("common.shards.make", ["--csv", "{file}", "--images", "{dir}", "--out", "{dir}"], 1,
     "file.txt"),
    ("common.diagrams.__main__", ["--out", "{file}"], 2, "--out"),
    ("common.diagrams.__main__", ["--only", "bogus"], 2, "--only"),
    ("course.publishing.site", ["--root", "{missing}", "--out", "{site}"], 2, "--root"),
    ("course.publishing.site", ["--root", "{file}", "--out", "{site}"], 2, "--root"),
    ("course.publishing.site", ["--root", "{dir}", "--out", "{site}"], 2, "--root"),
    ("course.publishing.site", ["--out", "{file}"], 2, "--out"),
    ("common.tools.make_data", ["--root", "/proc/companion/shapes"], 1, "--root"),  # a FileNotFoundError traceback before
    ("course.publishing.site", ["--out", "."], 2, "--out"),  # the repository itself (a ValueError traceback before)
    ("course.publishing.site", ["--out", "/"], 2, "--out"),
    ("course.publishing.translate", ["status", "--chapters", "{missing}"], 2, "--chapters"),
    ("course.publishing.translate", ["status", "--chapters", "{file}"], 2, "--chapters"),
    ("course.publishing.translate", ["status", "--chapters", "{dir}"], 2, "--chapters"),
    ("course.publishing.translate", ["status", "--notebooks", "99_nothing.ipynb"], 2, "--notebooks"),
    ("course.publishing.translate", ["check", "--notebooks", "99_nothing.ipynb"], 2, "--notebooks"),
    ("course.publishing.translate", ["extract", "--notebooks", "../README.md"], 2, "--notebooks"),
    ("course.assignments", ["list", "--sources", "{missing}"], 2, "--sources"),
    ("course.assignments", ["list", "--sources", "{file}"], 2, "--sources"),
    ("course.assignments", ["list", "--sources", "{dir}"], 2, "--sources"),  # was rc 1, unnamed
    ("course.assignments", ["build", "--out", "{file}"], 2, "--out"),
    ("course.assignments", ["build", "--sources", "{ex}", "--out", "{ex}"], 2, "--out"),
    ("course.assignments", ["build", "--sources", "{ex}"], 2, "--out"),  # not solutions/: no learner folder
    *[("course.grading.classroom", ["--submissions", "{dir}", "--out", "{root}/grades", *argv], 2, flag)
      for argv, flag in [  # each made a correct submission score 0/10 (8/10 for --memory-mb -1), rc 0
          (["--cell-timeout", "0"], "--cell-timeout"), (["--cpu-seconds", "0"], "--cpu-seconds"),
          (["--processes", "0"], "--processes"), (["--open-files", "0"], "--open-files"),
          (["--timeout", "-1"], "--timeout"), (["--memory-mb", "-1"], "--memory-mb"),
          (["--file-mb", "0"], "--file-mb"), (["--timeout", "nan"], "--timeout"),
          (["--cell-timeout", "inf"], "--cell-timeout"), (["--memory-mb", "nan"], "--memory-mb"),
          (["--sources", "{missing}"], "--sources"), (["--out", "{file}"], "--out")]],
    ("course.grading.classroom", ["--submissions", "{file}"], 2, "--submissions"),
    # An empty --sources graded every student against nothing, rc 0; an --out inside
    # --submissions put everyone's grades into a student's folder (or made them a student).
    ("course.grading.classroom", ["--submissions", "{subs}", "--out", "{root}/grades", "--sources",
                               "{dir}"], 2, "--sources"),
    ("course.grading.classroom", ["--submissions", "{subs}", "--out", "{subs}/alice"], 2, "--out"),
    ("course.grading.classroom", ["--submissions", "{subs}", "--out", "{subs}"], 2, "--out"),
    ("course.grading.classroom", ["--submissions", "{dir}", "--out", "{root}/grades", "--notebooks",
                               "ex99_nothing"], 1, "ex99_nothing"),
]


@pytest.mark.parametrize(("module", "argv", "code", "named"), CASES,
                         ids=[f"{m} {' '.join(a)}" for m, a, _, _ in CASES])
def test_a_bad_value_is_refused_by_name_without_a_traceback(module, argv, code, named, places,
                                                             capsys):
    argv = [arg.format(**places) for arg in argv]
    got, err = _run(module, argv, capsys)
    assert got == code, err[-2000:]
    assert named in err, err[-2000:]
    assert "Traceback" not in err
    assert len(err.strip().splitlines()[-1]) < 400  # one line says it, not a dump


def _found(module: str, argv: list[str], code: int, named: str, fix: str):
    """A case the issue-30 audit found let through, with where its fix went."""
    return pytest.param(module, argv, code, named, id=f"{module} {' '.join(argv)}")


#: Bad values the issue-30 audit found let through, each with the fix that now refuses it.
FOUND_BY_AUDIT = [
    *[_found(module, [*argv, "--seed", "-1"], 2, "--seed", f"non_negative(config, 'seed') in "
               f"{owner}") for module, argv, owner in [  # "seed must be non-negative", unnamed
        (DDP, ["--tiny", "--data", "{data}"], "common/ddp/config.py check_config"),
        (FSDP, ["--tiny", "--data", "{data}"], "common/fsdp/config.py check_config"),
        (SHARDS, ["--tiny", "--shards", "{shards}", "--val-shards", "{shards}"],  # rc 1, unnamed
         "common/shards/train.py check_config")]],
    *[_found(FSDP, ["--tiny", "--data", "{data}", "--checkpoint", f"{{root}}/{flag[2:]}", flag,
                      f"{{root}}/{flag[2:]}"], 2, flag,  # trained, then an IsADirectoryError
               "distinct_files(config, 'checkpoint', 'save_final', 'log_file') in "
               "common/fsdp/config.py") for flag in ("--save-final", "--log-file")],
    _found(DDP, ["--tiny", "--data", "{data}", "--weights", "{notes}"], 2, "--weights",
             "common/models.py load_weights to catch torch.load's IndexError (a text file) as "
             "snapshot.read_snapshot does (all three trainers: an IndexError traceback)"),
    _found("common.shards.make", ["--images", "{dir}", "--out", "{root}/made"], 2, "--images",
             "common/shards/make.py to refuse --images without --csv (rc 0: shards of the "
             "default data were written instead)"),
]


@pytest.mark.parametrize(("module", "argv", "code", "named"), FOUND_BY_AUDIT)
def test_a_bad_value_the_audit_found_is_refused_by_name(module, argv, code, named, places,
                                                        capsys):
    test_a_bad_value_is_refused_by_name_without_a_traceback(module, argv, code, named, places,
                                                            capsys)


@pytest.mark.parametrize("module", ["common.ddp.bench", "common.fsdp.bench"])
def test_a_benchmark_run_that_fails_is_its_rank_s_one_line(module, places, monkeypatch, capsys):
    """A run ``torchrun`` reports failed (here: the trainer refused a batch larger than the
    data) was a RuntimeError holding torchrun's whole output; now it is the rank's line."""
    said = "rank 0: error: 960 training images are too few for --batch-size 4000"

    def refused(command, **_):  # what run_command raises, torchrun's own traceback included
        raise RuntimeError(f"{' '.join(command)} exited with 1:\ndevice plan: cpu\n{said}\n"
                           "Traceback (most recent call last):\n  File \"run.py\"\n"
                           "ChildFailedError: common.fsdp.train FAILED")

    monkeypatch.setattr(importlib.import_module(module), "run_command", refused)
    code, err = _run(module, ["--data", places["data"], "--per-rank-batch", "2"]
                     if module == "common.ddp.bench" else ["--ranks", "1"], capsys)
    assert code == 1 and err.strip().splitlines()[-1] == f"{module}: error: {said}", err


def test_a_repacked_shard_is_refused_before_a_worker_starts(places, tmp_path, capsys):
    """A repacked copy of shard 0 added as another shard would be read twice per epoch on
    1 rank x 2 workers. The keys are checked as the dataset is built, before any DataLoader
    worker starts (a worker here would be refused: tests/unit starts no process)."""
    from tests.helpers import repack, with_extra_shard

    folder = tmp_path / "shards"
    folder.mkdir()
    repacked = repack(Path(places["shards"]) / "shard-000000.tar", folder / "shard-000009.tar")
    with_extra_shard(Path(places["shards"]) / "manifest.json", folder, repacked)
    code, err = _run(SHARDS, ["--tiny", "--shards", str(folder), "--val-shards", places["shards"],
                              "--num-workers", "2"], capsys)
    assert code == 1 and "Traceback" not in err
    assert f"sample key '00000000' is in shard {folder / 'shard-000000.tar'} and again in shard " \
           f"{repacked}" in err


def test_a_folder_holding_the_site_staging_of_a_user_is_left_alone(places, capsys):
    user_file = Path(places["user_file"])
    code, err = _run("course.publishing.site", ["--out", places["site"]], capsys)
    assert code == 1 and "site-src" in err and "Traceback" not in err
    assert user_file.read_text() == "the user's own notes\n"  # not deleted
    assert not any(Path(places["site"]).iterdir())  # --out untouched too


def test_the_site_staging_folder_is_stamped_and_reused(tmp_path):
    from course.publishing.site import MARKER, prepare_work

    prepare_work(tmp_path / "w")  # new: created and stamped
    (tmp_path / "w" / "en").mkdir()
    prepare_work(tmp_path / "w")  # ours: reused
    assert (tmp_path / "w" / MARKER).is_file()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("")
    with pytest.raises(FileExistsError, match="not written by course.publishing.site"):
        prepare_work(tmp_path / "other")


@pytest.mark.parametrize("module", [DDP, FSDP])
def test_a_cache_root_that_is_a_file_is_one_line(module, tiny_data, tmp_path, capsys):
    import shutil

    shutil.copytree(tiny_data.root, tmp_path / "shapes")
    (tmp_path / "cache").write_text("a file where the cache folder goes\n")
    code, err = _run(module, ["--tiny", "--no-augment", "--data-pipeline", "cache", "--data",
                              str(tmp_path / "shapes")], capsys)
    assert code == 2 and "is a file, not a folder" in err and "Traceback" not in err


def test_make_shards_prefix_writes_nothing_outside_out(places, capsys, tmp_path):
    out = tmp_path / "out"
    code, err = _run("common.shards.make", ["--prefix", "../escaped", "--out", str(out)], capsys)
    assert code == 2 and "--prefix" in err
    assert not list(tmp_path.glob("escaped*")) and not out.exists()


def test_a_manifest_without_classes_bounds_labels_by_num_classes(places):
    from common.shards.train import ShardTrainConfig, read_shards

    config = ShardTrainConfig(shards=places["bare"], num_classes=3)
    assert {shard.num_classes for shard in read_shards(config, "shards")} == {3}
    named = ShardTrainConfig(shards=places["shards"], num_classes=6)
    assert {shard.num_classes for shard in read_shards(named, "shards")} == {6}
    manifest = json.loads((Path(places["shards"]) / "manifest.json").read_text())
    assert len(manifest["classes"]) == 6


def test_the_translation_status_of_one_notebook_is_that_notebook(capsys):
    from course.publishing import translate
    from course.publishing.translate.__main__ import main

    notebook = translate.english_notebooks()[0]
    assert main(["status", "--notebooks", notebook]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and notebook in lines[0]


def test_the_validators(tmp_path):
    class C:
        lr, steps, sizes, quality = math.nan, 4, (2, 9), 0
        folder, file, out, log, prefix = str(tmp_path), str(tmp_path / "f"), "", "", "a/b"

    (tmp_path / "f").write_text("")
    assert finite(C, "lr") and not finite(C, "steps")
    assert at_least(C, 8, "steps", why="w") == {"steps": "must be at least 8 (w), got 4"}
    assert at_least(C, 2, "sizes") == {} and at_least(C, 3, "sizes")
    assert in_range(C, "quality", 1, 95) and not in_range(C, "steps", 1, 95)
    assert in_range(C, "lr", 0, 1)  # nan is in no range
    assert is_dir(C, "file") and not is_dir(C, "folder") and not is_dir(C, "out")
    assert is_file(C, "folder") and not is_file(C, "file")
    assert is_dir_or_absent(C, "file") and not is_dir_or_absent(C, "folder")
    assert is_file_or_absent(C, "folder") and not is_file_or_absent(C, "file")
    C.out = C.log = str(tmp_path / "same")
    assert distinct_files(C, "out", "log") == {"log": f"names the same file as --out ({C.log})"}
    C.log = str(tmp_path / "same" / "log.jsonl")  # the first written leaves no room for the other
    assert "are inside one another" in distinct_files(C, "out", "log")["log"]
    assert "are inside one another" in distinct_files(C, "log", "out")["out"]
    C.log = str(tmp_path / "same.log")
    assert distinct_files(C, "out", "log") == {}
    assert file_name_part(C, "prefix")
    C.prefix = "shard"
    assert not file_name_part(C, "prefix")
