"""Real local clusters for the farm engine tests and the farm bench: a single-node Slurm (munged, slurmctld, slurmd
under a temp dir, free ports) and a Ray head owned by a child process. Each is a context manager yielding the
environment its clients need and stopping exactly what it started; RuntimeError names what is missing."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo")

SLURM_CONF = """ClusterName=rowbeamtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SlurmdParameters=config_overrides
NodeName=rowbeamnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=rowbeam Nodes=rowbeamnode Default=YES MaxTime=INFINITE State=UP
"""

RAY_HEAD = """
import sys, ray
ctx = ray.init(num_cpus=int(sys.argv[2]), _temp_dir=sys.argv[1], include_dashboard=False, logging_level="ERROR")
print("ADDRESS", ctx.address_info["gcs_address"], flush=True)
sys.stdin.read()          # until the owner closes stdin: then stop this cluster (never `ray stop`)
ray.shutdown()
"""


def tool(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs: list) -> None:
    for p in reversed(procs):
        p.terminate()
    for p in reversed(procs):
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


@contextmanager
def slurm_cluster(d: Path, cpus: int = 3):
    """A single-node Slurm on localhost with `cpus` CPUs (partition 'rowbeam'), its key, sockets, state and config
    under the new folder `d`. Yields the environment for sbatch/squeue (SLURM_CONF)."""
    tools = {n: tool(n) for n in SLURM_TOOLS}
    missing = [n for n, p in tools.items() if p is None]
    if missing:
        raise RuntimeError(f"Slurm binaries missing: {', '.join(missing)} (apt-get install -y slurm-wlm munge)")
    for sub in ("munge", "state", "spool"):
        (d / sub).mkdir(parents=True)
    (d / "munge").chmod(0o755)
    (d / "munge/key").write_bytes(os.urandom(1024))
    (d / "munge/key").chmod(0o400)
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    sock, conf = d / "munge/munge.sock", d / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=host, ctld_port=free_port(), d_port=free_port(), sock=sock, d=d, cpus=cpus))
    env = dict(os.environ, SLURM_CONF=str(conf))
    daemons = []
    try:
        for argv in ([tools["munged"], "-F", "-f", f"--socket={sock}", f"--key-file={d}/munge/key",
                      f"--log-file={d}/munge/log", f"--pid-file={d}/munge/pid", f"--seed-file={d}/munge/seed"],
                     [tools["slurmctld"], "-D", "-f", str(conf)],
                     [tools["slurmd"], "-D", "-N", "rowbeamnode", "-f", str(conf)]):
            daemons.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.5)
        deadline = time.time() + 60
        while time.time() < deadline:
            state = subprocess.run([tools["sinfo"], "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            if state.stdout.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            log = d / "slurmctld.log"
            raise RuntimeError(f"Slurm did not come up: {log.read_text()[-500:] if log.exists() else 'no log'}")
        yield env
    finally:
        _stop(daemons)


@contextmanager
def ray_cluster(d: Path | None = None, cpus: int = 3):
    """A local Ray cluster (`cpus` CPUs, token auth) owned by a child process with its own short temp dir (Ray's
    unix sockets live under it; `d` is not used); closing its stdin shuts down exactly that cluster. Yields the
    environment for its clients (RAY_ADDRESS, RAY_AUTH_MODE)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise RuntimeError("ray is not installed (pip install ray==2.60.0)") from None
    tmp = Path(tempfile.mkdtemp(prefix="rowbeam-ray-"))
    env = dict(os.environ, RAY_AUTH_MODE="token")
    head = subprocess.Popen([sys.executable, "-c", RAY_HEAD, str(tmp), str(cpus)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = head.stdout.readline()
        if not line.startswith("ADDRESS "):
            raise RuntimeError(f"Ray head did not start: {line!r}")
        yield {**env, "RAY_ADDRESS": line.split()[1]}
    finally:
        head.stdin.close()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        shutil.rmtree(tmp, ignore_errors=True)
