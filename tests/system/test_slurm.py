"""chapters/04_slurm_ddp_train.sbatch under a real Slurm: a one-host cluster of the test's own.

The fixture starts munged, slurmctld and one slurmd (Debian's ``slurm-wlm``, ``make system-deps``)
with a slurm.conf, a munge key and state/spool/log folders in a temporary folder, on free ports,
without cgroups; it stops them, and anything their jobs left, even when the test fails. The test
submits the script on CPUs (one node, 2 ranks, gloo, a tiny dataset), requeues the job after its
first snapshot as a preemption would, and checks that the second run resumed from that snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from common.ddp.launch import free_port

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "chapters" / "04_slurm_ddp_train.sbatch"
TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "scancel")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
STEPS_PER_EPOCH, EPOCHS = 3, 2  # the tiny data: 24 training images, global batch 8
TRAIN_ARGS = ["--num-epochs", str(EPOCHS), "--batch-size", "8", "--lr", "0.05", "--image-size", "32",
              "--width", "4", "--norm", "group", "--no-amp", "--num-workers", "0", "--threads", "1",
              "--snapshot-every", "1", "--step-delay", "0.5"]  # slow enough to requeue mid-run
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL")


def slurm_conf(root: Path, ports: tuple[int, int]) -> str:
    """A one-host cluster: this machine is controller and node, no cgroups, no accounting."""
    host = socket.gethostname().split(".")[0]
    return "\n".join([
        "ClusterName=companion-test", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}", f"SlurmdPort={ports[1]}",
        f"SlurmUser={psutil.Process().username()}", "AuthType=auth/munge", "CredType=cred/munge",
        # cred_expire also delays a requeued job's restart (default 120 s)
        f"AuthInfo=socket={root / 'munge.socket'},cred_expire=5",
        "SchedulerParameters=sched_interval=1",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none",
        "SlurmdParameters=config_overrides", "ReturnToService=2", "KillWait=2",
        "MailProg=/bin/true",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""])


class Cluster:
    """munged, slurmctld and slurmd started in ``root``; ``stop`` ends them and their jobs."""

    def __init__(self, root: Path) -> None:
        self.root, self.daemons = root, {}
        for folder in ("state", "spool", "log"):
            (root / folder).mkdir(parents=True)
        (root / "slurm.conf").write_text(slurm_conf(root, distinct_free_ports(2)))
        self.env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf"), "PATH": SEARCH_PATH}

    def start(self) -> None:
        self.command("mungekey", "--create", f"--keyfile={self.root / 'munge.key'}")
        self.spawn("munged", "--foreground", "--force", f"--socket={self.root / 'munge.socket'}",
                   f"--key-file={self.root / 'munge.key'}", f"--pid-file={self.root / 'munged.pid'}",
                   f"--log-file={self.root / 'log' / 'munged.log'}",
                   f"--seed-file={self.root / 'munged.seed'}")
        self.wait_for(lambda: (self.root / "munge.socket").exists(), "munged's socket", 15)
        self.spawn("slurmctld", "-D", "-i")
        self.spawn("slurmd", "-D")
        self.wait_for(lambda: self.command("sinfo", "-h", "-o", "%T", check=False) == "idle",
                      "the node to be idle", 30)

    def spawn(self, name: str, *args: str) -> None:
        log = (self.root / "log" / f"{name}.out").open("w")
        self.daemons[name] = subprocess.Popen([shutil.which(name, path=SEARCH_PATH), *args],
                                              env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def command(self, name: str, *args: str, check: bool = True) -> str:
        done = subprocess.run([shutil.which(name, path=SEARCH_PATH), *args], env=self.env,
                              capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            pytest.fail(f"{name} {' '.join(args)} exited {done.returncode}: {done.stderr}"
                        f"{self.logs()}")
        return done.stdout.strip()

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields of one job (JobState, Restarts, ...)."""
        fields = self.command("scontrol", "show", "job", "-o", job_id).split()
        return dict(field.split("=", 1) for field in fields if "=" in field)

    def wait_for(self, condition, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            dead = [name for name, process in self.daemons.items() if process.poll() is not None]
            if dead or time.monotonic() > deadline:
                pytest.fail(f"waited {timeout} s for {what}; exited: {dead or 'none'}{self.logs()}")
            time.sleep(0.3)

    def logs(self) -> str:
        tails = [f"\n--- {path.name}:\n" + "\n".join(path.read_text().splitlines()[-15:])
                 for path in sorted((self.root / "log").iterdir())]
        return "".join(tails)

    def stop(self) -> None:
        if "slurmctld" in self.daemons:
            self.command("scancel", "--full", f"--user={psutil.Process().username()}", check=False)
        for process in reversed(self.daemons.values()):
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for leftover in self.job_processes():
            leftover.kill()

    def job_processes(self) -> list[psutil.Process]:
        """Processes that still carry this cluster's SLURM_CONF: what its jobs started."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.pid != os.getpid() and \
                        process.environ().get("SLURM_CONF") == self.env["SLURM_CONF"]:
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found


def distinct_free_ports(count: int) -> tuple[int, ...]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return tuple(sorted(ports))


@pytest.fixture
def slurm(tmp_path):
    missing = [tool for tool in TOOLS if shutil.which(tool, path=SEARCH_PATH) is None]
    if missing:
        pytest.skip(f"Slurm not found (no {', '.join(missing)}): this test starts a one-host Slurm "
                    "cluster. Install it with `make system-deps` (Debian/Ubuntu: sudo apt-get "
                    "install -y slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start jobs: run this test as root (a container)")
    cluster = Cluster(tmp_path / "slurm")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def records(log: Path, event: str) -> list[dict]:
    """The log's ``event`` records; a line still being written (no newline yet) is left out."""
    lines = log.read_text().split("\n")[:-1] if log.is_file() else []
    return [record for record in map(json.loads, lines) if record["event"] == event]


def text(path: Path) -> str:
    return path.read_text() if path.is_file() else f"(no {path}: the job never started)"


def submit(slurm: Cluster, data_root: Path, run_dir: Path) -> str:
    """The script on CPUs: one node, no GPU, 2 ranks (gloo), the rendezvous on a free port."""
    settings = {"NPROC_PER_NODE": "2", "COMPANION_DEVICE": "cpu", "COMPANION_DATA": str(data_root),
                "RUN_DIR": str(run_dir), "RDZV_PORT": str(free_port()), "PYTHON": sys.executable,
                "OMP_NUM_THREADS": "1"}
    run_dir.mkdir()  # Slurm writes --output only into a folder that exists
    export = ",".join(["ALL", *(f"{name}={value}" for name, value in settings.items())])
    return slurm.command("sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0",
                         "--cpus-per-task=2", "--time=00:05:00", f"--chdir={REPO}",
                         f"--output={run_dir / 'slurm.out'}", f"--export={export}",
                         str(SCRIPT), *TRAIN_ARGS)


def requeue(slurm: Cluster, job_id: str) -> None:
    """What a preemption does: stop the running job and queue it again, under the same id."""
    slurm.command("scontrol", "requeue", job_id)
    # A requeued job may start again after cred_expire (BeginTime); let it start at once (if it
    # has not started already: then the update is refused, which does not matter).
    slurm.wait_for(lambda: slurm.job(job_id)["JobState"] != "COMPLETING", "the job to stop", 60)
    slurm.command("scontrol", "update", f"JobId={job_id}", "StartTime=now", check=False)


@pytest.mark.slow
def test_sbatch_script_trains_snapshots_and_resumes_after_requeue(slurm, tiny_data, tmp_path):
    run_dir, total = tmp_path / "run", STEPS_PER_EPOCH * EPOCHS
    log, out = run_dir / "log.jsonl", run_dir / "slurm.out"
    job_id = submit(slurm, tiny_data.root.parent, run_dir)
    slurm.wait_for(lambda: records(log, "snapshot") or slurm.job(job_id)["JobState"] in ENDED,
                   "the first snapshot", 90)
    assert records(log, "snapshot"), f"job {job_id} ended without a snapshot:\n{text(out)}" \
        f"{slurm.logs()}"
    requeue(slurm, job_id)
    slurm.wait_for(lambda: slurm.job(job_id)["JobState"] in ENDED
                   and slurm.job(job_id)["Restarts"] == "1", "the requeued job to finish", 120)
    output = text(out) + slurm.logs()
    assert slurm.job(job_id)["JobState"] == "COMPLETED", output
    assert f"job {job_id} attempt 0:" in output and f"job {job_id} attempt 1:" in output
    starts, resumes = records(log, "start"), records(log, "resume")
    assert [(r["world_size"], r["backend"]) for r in starts] == [(2, "gloo")] * 2, output
    assert len(resumes) == 1 and 1 <= resumes[0]["step"] < total, resumes
    assert resumes[0]["snapshot"] == str(run_dir / "snapshot.pt")
    assert [r["step"] for r in records(log, "done")] == [total], output
    assert (run_dir / "model.pt").is_file()
