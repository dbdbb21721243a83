#!/usr/bin/env bash
# A real single-node Slurm for the tests that submit to it: Debian's slurm-wlm and munge,
# slurmctld and slurmd on this machine, the host's CPUs as the node's devices, a tree topology
# (one leaf switch) so `--switches` is honoured. Idempotent: a running cluster is left as it is.
set -euo pipefail

HOST="$(hostname -s)"
CPUS="$(nproc)"
MEM_MB="$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq slurm-wlm munge >/dev/null
fi

CONF_DIR=/etc/slurm
$SUDO mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    $SUDO mkdir -p /etc/munge
    $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
$SUDO chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
$SUDO chmod 0400 /etc/munge/munge.key

$SUDO tee "$CONF_DIR/slurm.conf" >/dev/null <<CONF
ClusterName=xirang
SlurmctldHost=${HOST}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
TopologyPlugin=topology/tree
ReturnToService=2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
MpiDefault=none
NodeName=${HOST} CPUs=${CPUS} RealMemory=${MEM_MB} State=UNKNOWN
PartitionName=debug Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP
CONF
$SUDO tee "$CONF_DIR/topology.conf" >/dev/null <<CONF
SwitchName=leaf0 Nodes=${HOST}
CONF
# proctrack/linuxproc and task/none need no cgroup.conf; a stale one breaks slurmd's start.
$SUDO rm -f "$CONF_DIR/cgroup.conf"

# running PIDFILE COMM: this cluster's daemon is up (by its pid file, not its name: the
# multi-node cluster of slurm_multinode.sh runs slurmctld and slurmds of its own beside it)
running() { [ -s "$1" ] && [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ]; }
pgrep -x munged >/dev/null || $SUDO -u munge munged 2>/dev/null || $SUDO munged --force
running /run/slurmctld.pid slurmctld || $SUDO slurmctld
running /run/slurmd.pid slurmd || $SUDO slurmd

for _ in $(seq 1 30); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        $SUDO scontrol update NodeName="${HOST}" State=RESUME 2>/dev/null || true
        echo "slurm: single-node cluster '${HOST}' up (${CPUS} CPUs)"
        exit 0
    fi
    $SUDO scontrol update NodeName="${HOST}" State=RESUME 2>/dev/null || true
    sleep 1
done
echo "slurm: node did not come up; see /var/log/slurm/" >&2
sinfo >&2 || true
exit 1
