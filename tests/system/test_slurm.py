"""chapters/04_slurm_ddp_train.sbatch under a real Slurm on two hosts of the test's own.

The hosts are network namespaces (tests/system/cluster.py: ``node0`` and ``node1``, each with its
own address, hostname and /etc/hosts). The fixture starts munged (its socket a file both hosts
see), slurmctld on ``node0`` and one slurmd per host (``NodeAddr`` its address), with a
slurm.conf, a munge key and state/spool/log folders in a temporary folder, without cgroups
(Debian's ``slurm-wlm``, ``make system-deps``); it stops them, and anything their jobs left, even
when the test fails. The test submits the script with ``--nodes=2`` on CPUs (one rank per node,
gloo, a tiny dataset): srun starts torchrun on both hosts, which meet at ``node0``'s rendezvous;
it requeues the job after its first snapshot as a preemption would, and checks that the second
run resumed from that snapshot on both nodes again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from common.ddp.cluster import Cluster as Hosts
from common.ddp.cluster import unavailable
from tests.system.cluster import builder
from tests.system_parts import require

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "chapters" / "04_slurm_ddp_train.sbatch"
TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "scancel",
         "nsenter")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
STEPS_PER_EPOCH, EPOCHS = 3, 2  # the tiny data: 24 training images, global batch 8
TRAIN_ARGS = ["--num-epochs", str(EPOCHS), "--batch-size", "8", "--lr", "0.05", "--image-size", "32",
              "--width", "4", "--norm", "group", "--no-amp", "--num-workers", "0", "--threads", "1",
              "--snapshot-every", "1", "--step-delay", "0.5"]  # slow enough to requeue mid-run
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL")


def slurm_conf(root: Path, hosts: Hosts) -> str:
    """Two hosts: node0 is controller and node, node1 a node; no cgroups, no accounting."""
    nodes = ",".join(host.name for host in hosts.hosts)
    return "\n".join([
        "ClusterName=companion-test", f"SlurmctldHost=node0({hosts.hosts[0].address})",
        "SlurmctldPort=6817", "SlurmdPort=6818",
        f"SlurmUser={psutil.Process().username()}", "AuthType=auth/munge", "CredType=cred/munge",
        # cred_expire also delays a requeued job's restart (default 120 s)
        f"AuthInfo=socket={root / 'munge.socket'},cred_expire=5",
        "SchedulerParameters=sched_interval=1",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none",
        "SlurmdParameters=config_overrides", "ReturnToService=2", "KillWait=2",
        "MailProg=/bin/true",
        *(f"NodeName={host.name} NodeAddr={host.address} CPUs=2 State=UNKNOWN"
          for host in hosts.hosts),
        f"PartitionName=debug Nodes={nodes} Default=YES MaxTime=INFINITE State=UP", ""])


class Cluster:
    """munged, slurmctld and slurmd started in ``root``; ``stop`` ends them and their jobs."""

    def __init__(self, root: Path, hosts: Hosts) -> None:
        self.root, self.hosts, self.daemons = root, hosts, {}
        for folder in ("state", "log", *(f"spool/{host.name}" for host in hosts.hosts)):
            (root / folder).mkdir(parents=True)
        (root / "slurm.conf").write_text(slurm_conf(root, hosts))
        self.env = {"SLURM_CONF": str(root / "slurm.conf"), "PATH": SEARCH_PATH}

    def start(self) -> None:
        self.command("mungekey", "--create", f"--keyfile={self.root / 'munge.key'}")
        self.spawn("munged", None, "--foreground", "--force", f"--socket={self.root / 'munge.socket'}",
                   f"--key-file={self.root / 'munge.key'}", f"--pid-file={self.root / 'munged.pid'}",
                   f"--log-file={self.root / 'log' / 'munged.log'}",
                   f"--seed-file={self.root / 'munged.seed'}")
        self.wait_for(lambda: (self.root / "munge.socket").exists(), "munged's socket", 15)
        self.spawn("slurmctld", 0, "-D", "-i")
        for index, host in enumerate(self.hosts.hosts):
            self.spawn("slurmd", index, "-D", "-N", host.name)
        self.wait_for(lambda: self.command("sinfo", "-h", "-o", "%T", check=False).split()
                      == ["idle"], "both nodes to be idle", 60)

    def spawn(self, name: str, host: int | None, *args: str) -> None:
        """A daemon on this machine (``host`` None: munged) or on one of the hosts."""
        key = name if host is None else f"{name}-{host}"
        log = (self.root / "log" / f"{key}.out").open("w")
        argv = [shutil.which(name, path=SEARCH_PATH), *args]
        if host is None:
            self.daemons[key] = subprocess.Popen(argv, env={**os.environ, **self.env},
                                                 stdout=log, stderr=subprocess.STDOUT)
        else:
            # Not ip netns exec, which mounts a sysfs of the namespace's own, without the cgroup
            # file systems slurmd needs: enter only the host's network namespace, then in a mount
            # namespace of the daemon's own show the host's /etc/hosts and nsswitch.conf, as ip
            # netns exec does; the jobs slurmd starts inherit all of it.
            host_ = self.hosts.hosts[host]
            etc = f"/etc/netns/{host_.namespace}"
            script = (f'hostname {host_.name} && mount --bind {etc}/hosts /etc/hosts && '
                      f'mount --bind {etc}/nsswitch.conf /etc/nsswitch.conf && exec "$@"')
            wrapped = [shutil.which("nsenter", path=SEARCH_PATH),
                       f"--net=/var/run/netns/{host_.namespace}", "unshare", "--uts", "--mount",
                       "sh", "-c", script, name, *argv]
            self.daemons[key] = subprocess.Popen(wrapped, env=self.hosts.environment(self.env),
                                                 stdout=log, stderr=subprocess.STDOUT)

    def command(self, name: str, *args: str, check: bool = True) -> str:
        """A Slurm client command, run on node0 (where slurmctld listens)."""
        done = self.hosts.run(0, [shutil.which(name, path=SEARCH_PATH), *args], env=self.env,
                              timeout=30)
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
        if "slurmctld-0" in self.daemons:
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
                        process.environ().get("SLURM_CONF") == self.env["SLURM_CONF"] and \
                        process.pid not in [daemon.pid for daemon in self.daemons.values()]:
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found


@pytest.fixture
def make_cluster():
    yield from builder()


@pytest.fixture
def slurm(make_cluster):
    missing = [tool for tool in TOOLS if shutil.which(tool, path=SEARCH_PATH) is None]
    require("Slurm (slurm-wlm, munge)", f"no {', '.join(missing)}: make system-deps (Debian/Ubuntu: "
            "apt-get install -y slurm-wlm munge)" if missing else None)
    require("root for network namespaces", unavailable())  # slurmd too must run as root
    # Slurm's sockets live under its spool and state folders, and a Unix socket's path has at most
    # 107 bytes: a pytest tmp_path (…/popen-gw0/test_sbatch_script_…0/) is too long for
    # …/spool/node1/node1_1.batch, so the cluster gets a short folder of its own.
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
    cluster = Cluster(root, make_cluster(2))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def records(log: Path, event: str) -> list[dict]:
    """The log's ``event`` records; a line still being written (no newline yet) is left out."""
    lines = log.read_text().split("\n")[:-1] if log.is_file() else []
    return [record for record in map(json.loads, lines) if record["event"] == event]


def text(path: Path) -> str:
    return path.read_text() if path.is_file() else f"(no {path}: the job never started)"


def submit(slurm: Cluster, data_root: Path, run_dir: Path) -> str:
    """The script on CPUs: two nodes, no GPU, 1 rank each (gloo), the rendezvous on node0."""
    settings = {"NPROC_PER_NODE": "1", "COMPANION_DEVICE": "cpu", "COMPANION_DATA": str(data_root),
                "RUN_DIR": str(run_dir), "RDZV_PORT": "29500", "PYTHON": sys.executable,
                "OMP_NUM_THREADS": "1"}
    run_dir.mkdir()  # Slurm writes --output only into a folder that exists
    export = ",".join(["ALL", *(f"{name}={value}" for name, value in settings.items())])
    return slurm.command("sbatch", "--parsable", "--nodes=2", "--gpus-per-node=0",
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
    assert f"job {job_id} attempt 0: 2 node(s) x 1 rank(s), rendezvous node0:29500" in output
    assert f"job {job_id} attempt 1: 2 node(s)" in output
    starts, resumes = records(log, "start"), records(log, "resume")
    assert [(r["world_size"], r["backend"]) for r in starts] == [(2, "gloo")] * 2, output
    assert len(resumes) == 1 and 1 <= resumes[0]["step"] < total, resumes
    assert resumes[0]["snapshot"] == str(run_dir / "snapshot.pt")
    assert [r["step"] for r in records(log, "done")] == [total], output
    assert (run_dir / "model.pt").is_file()
