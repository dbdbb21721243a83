#!/usr/bin/env bash
# A real multi-node Slurm on one host, for the multi-node tests (tests/plugins/xirang_slurm/
# test_slurm_multinode.py): slurmctld in the root network namespace on a bridge of its own, and one
# slurmd per compute node, each in its own network, UTS and mount namespace (its own IP, its own
# hostname nodeN, its own /etc/hosts), as real nodes have. Apart from .ci/services/slurm.sh's
# single-node cluster (own controller port, own config, state and pid files), which keeps
# working beside it. .ci/run starts it with no arguments (= up).
#
#   slurm_multinode.sh [up [N]]   # N compute nodes (default 2, or $MN_NODES); idempotent
#   slurm_multinode.sh down       # stop its daemons and jobs, remove namespaces, bridge, database
#   slurm_multinode.sh status
#
# Accounting (MN_ACCOUNTING=1, the default; 0: none): slurmdbd on a MariaDB of its own (its own
# data folder, socket and loopback port under $MN_DIR; Debian's slurmdbd and mariadb-server),
# and slurmctld with AccountingStorageEnforce=limits: every submitter needs an association
# (root has one in account root), and an account's GrpTRES bounds its jobs however they are
# submitted. The xirang pool keeps one account per project (docs/pool.md). `down` stops both
# and deletes the database: each `up` starts with no accounts but root's.
#
# Clients use this cluster's config:   export SLURM_CONF=$MN_DIR/etc/slurm.conf
# (MN_DIR defaults to /tmp/xirang-multinode; the tests find it there or through
# XIRANG_SLURM_MULTINODE). Debian's slurm-wlm + munge; root only.
#
# Network: only addresses this script creates: bridge xrbr0 = 10.250.0.1/24 in the root
# namespace (slurmctld), node i = 10.250.0.(10+i) on eth0 inside namespace xrn<i>. The node
# namespaces have no default route; each slurmd runs in its own mount namespace where
# /etc/netns/xrn<i>/{hosts,resolv.conf} are bound over /etc/hosts and /etc/resolv.conf, so every
# name a job looks up resolves from files and a DNS query can only go to 127.0.0.1 in the node.
# The root namespace's /etc/hosts gets a tagged block "10.250.0.1x nodeX" (removed by `down`).
# Each node shares the host's PID namespace and filesystem (a shared-filesystem cluster).
# SlurmdTimeout is short so a killed node is declared DOWN (and its job requeued) in seconds,
# and cred_expire too (a requeued job waits that long before it starts again; default 120 s),
# and the scheduler passes every second (sched_interval, bf_interval: a requeued job that may
# start again is started then, not at the next 30 or 60 s pass).
set -euo pipefail

MN_DIR="${MN_DIR:-${XIRANG_SLURM_MULTINODE:-/tmp/xirang-multinode}}"          # all state: conf, spool, logs, pid files
MN_BR="${MN_BR:-xrbr0}"
MN_NET="${MN_NET:-10.250.0}"                  # /24 prefix: .1 = controller, .1i = node i
MN_NS_PREFIX="${MN_NS_PREFIX:-xrn}"
MN_CTLD_PORT="${MN_CTLD_PORT:-6917}"          # not 6817, so a single-node Slurm can coexist
MN_ACCOUNTING="${MN_ACCOUNTING:-1}"           # slurmdbd + MariaDB, association limits enforced
MN_DBD_PORT="${MN_DBD_PORT:-6919}"            # slurmdbd (not 6819, Slurm's default)
MN_DB_PORT="${MN_DB_PORT:-6920}"              # its MariaDB, on 127.0.0.1 only
# CPUs each node advertises (all share the host). `--all`, and slurmd started on every CPU
# below: a caller pinned to fewer (a test process that set its affinity) must not make a
# restarted node register fewer CPUs than the config says (Slurm then sets it INVAL)
MN_CPUS="${MN_CPUS:-$(nproc --all)}"
MN_ALL_CPUS="0-$(( $(nproc --all) - 1 ))"
MN_MEM_MB="${MN_MEM_MB:-2048}"
CONF="$MN_DIR/etc/slurm.conf"
HOSTS_TAG="# multinode-slurm ($MN_BR)"
CTL_HOST="$(hostname -s)"

log() { echo "multinode-slurm: $*" >&2; }
# alive PIDFILE COMM: the pid in the file is a live (not zombie) process named COMM
alive() {
    local pid
    [ -s "$1" ] || return 1
    pid="$(cat "$1")"
    [ -r "/proc/$pid/stat" ] || return 1
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

install_packages() {
    if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
    fi
    if [ "$MN_ACCOUNTING" = 1 ] && { ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; }; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmdbd mariadb-server >/dev/null
    fi
}

# ---------------------------------------------------------------- network
net_up() {
    local n="$1" i ns
    if ! ip link show "$MN_BR" >/dev/null 2>&1; then
        ip link add "$MN_BR" type bridge
    fi
    ip addr replace "$MN_NET.1/24" dev "$MN_BR"
    ip link set "$MN_BR" up
    for i in $(seq 1 "$n"); do
        ns="$MN_NS_PREFIX$i"
        [ -e "/run/netns/$ns" ] || ip netns add "$ns"
        if ! ip link show "${MN_NS_PREFIX}v$i" >/dev/null 2>&1; then
            ip link add "${MN_NS_PREFIX}v$i" type veth peer name eth0 netns "$ns"
        fi
        ip link set "${MN_NS_PREFIX}v$i" master "$MN_BR" up
        ip -n "$ns" addr replace "$MN_NET.$((10 + i))/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        # name resolution inside the node: files only, and a resolver on loopback (nothing leaves)
        mkdir -p "/etc/netns/$ns"
        { echo "127.0.0.1 localhost"; hosts_block "$n"; } >"/etc/netns/$ns/hosts"
        echo "nameserver 127.0.0.1" >"/etc/netns/$ns/resolv.conf"
    done
    # the root namespace (slurmctld, clients) resolves the node names from /etc/hosts too
    hosts_remove
    { echo "$HOSTS_TAG begin"; hosts_block "$n"; echo "$HOSTS_TAG end"; } >>/etc/hosts
}

hosts_block() {
    local n="$1" i
    echo "$MN_NET.1 xrctl"
    for i in $(seq 1 "$n"); do echo "$MN_NET.$((10 + i)) node$i"; done
}

hosts_remove() {
    if grep -qF "$HOSTS_TAG begin" /etc/hosts 2>/dev/null; then
        # /etc/hosts may be a bind mount: rewrite in place, don't replace the file
        local tmp; tmp="$(mktemp)"
        awk -v b="$HOSTS_TAG begin" -v e="$HOSTS_TAG end" \
            '$0==b{skip=1;next} $0==e{skip=0;next} !skip' /etc/hosts >"$tmp"
        cat "$tmp" >/etc/hosts
        rm -f "$tmp"
    fi
}

net_down() {
    local ns i
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^${MN_NS_PREFIX}[0-9]+$" || true); do
        i="${ns#"$MN_NS_PREFIX"}"
        ip link del "${MN_NS_PREFIX}v$i" 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
        rm -rf "/etc/netns/$ns"
    done
    ip link del "$MN_BR" 2>/dev/null || true
    rmdir /etc/netns 2>/dev/null || true   # only if empty (ours were the only entries)
    hosts_remove
}

# ---------------------------------------------------------------- config
write_conf() {
    local n="$1" i
    mkdir -p "$MN_DIR"/{etc,state,spool,log,run}
    cat >"$CONF.tmp" <<CONF
ClusterName=xrmn
SlurmctldHost=${CTL_HOST}(${MN_NET}.1)
SlurmctldPort=${MN_CTLD_PORT}
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
StateSaveLocation=${MN_DIR}/state
SlurmdSpoolDir=${MN_DIR}/spool/%n
SlurmctldPidFile=${MN_DIR}/run/slurmctld.pid
SlurmdPidFile=${MN_DIR}/run/slurmd-%n.pid
SlurmctldLogFile=${MN_DIR}/log/slurmctld.log
SlurmdLogFile=${MN_DIR}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(accounting_conf)
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
KillWait=5
SlurmdTimeout=6
TopologyPlugin=topology/tree
JobRequeue=1
CONF
    for i in $(seq 1 "$n"); do
        echo "NodeName=node$i NodeHostname=node$i NodeAddr=${MN_NET}.$((10 + i)) CPUs=${MN_CPUS} RealMemory=${MN_MEM_MB} State=UNKNOWN" >>"$CONF.tmp"
    done
    echo "PartitionName=debug Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP" >>"$CONF.tmp"
    # one leaf switch over every node: `--switches` is honoured
    echo "SwitchName=leaf0 Nodes=node[1-$n]" >"$MN_DIR/etc/topology.conf"
    mv "$CONF.tmp" "$CONF"
    # task/none + proctrack/linuxproc need no cgroup.conf; never let one from /etc/slurm leak in
    rm -f "$MN_DIR/etc/cgroup.conf"
    echo "$n" >"$MN_DIR/nodes"
}

accounting_conf() {
    if [ "$MN_ACCOUNTING" = 1 ]; then
        printf '%s\n' AccountingStorageType=accounting_storage/slurmdbd AccountingStorageHost=localhost \
            "AccountingStoragePort=$MN_DBD_PORT" AccountingStorageEnforce=limits
    else
        echo AccountingStorageType=accounting_storage/none
    fi
}

# ---------------------------------------------------------------- accounting
# MariaDB of our own: data, socket and pid file in $MN_DIR/db (the mysql user's), port $MN_DB_PORT
# on loopback, log in $MN_DIR/log; slurmdbd reaches it as user slurm with a password made at `up`.
db_up() {
    local db="$MN_DIR/db" sock="$MN_DIR/db/mariadb.sock"
    alive "$db/mariadb.pid" mariadbd && return 0
    chmod 0755 "$MN_DIR"   # mysql passes through to its own folder
    if [ ! -d "$db/data/mysql" ]; then
        rm -rf "$db"
        mkdir -p "$db/data"
        chown -R mysql:mysql "$db"
        mariadb-install-db --no-defaults --user=mysql --datadir="$db/data" \
            --skip-test-db >"$MN_DIR/log/mariadb-install.log" 2>&1
    fi
    touch "$MN_DIR/log/mariadb.log"
    chown mysql:mysql "$MN_DIR/log/mariadb.log"
    setsid mariadbd --no-defaults --user=mysql --datadir="$db/data" --socket="$sock" \
        --port="$MN_DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
        --pid-file="$db/mariadb.pid" --log-error="$MN_DIR/log/mariadb.log" \
        --performance-schema=OFF --innodb-buffer-pool-size=64M --innodb-log-file-size=64M \
        --innodb-lock-wait-timeout=900 --max-connections=50 </dev/null >/dev/null 2>&1 &
    for _ in $(seq 1 300); do
        if mariadb --no-defaults -S "$sock" -u root -e 'SELECT 1' >/dev/null 2>&1; then break; fi
        sleep 0.1
    done
    mariadb --no-defaults -S "$sock" -u root -e 'SELECT 1' >/dev/null ||
        { log "MariaDB did not start; see $MN_DIR/log/mariadb.log"; return 1; }
    [ -s "$MN_DIR/etc/db.pass" ] || head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$MN_DIR/etc/db.pass"
    chmod 0600 "$MN_DIR/etc/db.pass"
    mariadb --no-defaults -S "$sock" -u root <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$MN_DIR/etc/db.pass")';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

dbd_up() {
    alive "$MN_DIR/run/slurmdbd.pid" slurmdbd && return 0
    # slurmdbd reads slurmdbd.conf beside $SLURM_CONF; it must be SlurmUser's alone (a password)
    cat >"$MN_DIR/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=${MN_DBD_PORT}
SlurmUser=root
PidFile=${MN_DIR}/run/slurmdbd.pid
LogFile=${MN_DIR}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${MN_DB_PORT}
StorageUser=slurm
StoragePass=$(cat "$MN_DIR/etc/db.pass")
StorageLoc=slurm_acct_db
CONF
    chmod 0600 "$MN_DIR/etc/slurmdbd.conf"
    SLURM_CONF="$CONF" slurmdbd
    for _ in $(seq 1 300); do
        if SLURM_CONF="$CONF" timeout 5 sacctmgr -n show cluster >/dev/null 2>&1; then break; fi
        sleep 0.1
    done
    SLURM_CONF="$CONF" timeout 5 sacctmgr -n show cluster >/dev/null ||
        { log "slurmdbd does not answer; see $MN_DIR/log/slurmdbd.log"; return 1; }
    # the cluster (and with it account root, user root) before slurmctld registers
    if [ -z "$(SLURM_CONF="$CONF" sacctmgr -n -P show cluster xrmn format=cluster)" ]; then
        SLURM_CONF="$CONF" sacctmgr -i add cluster xrmn >/dev/null
    fi
}

accounting_up() {
    if [ "$MN_ACCOUNTING" != 1 ]; then accounting_down; return 0; fi   # ours from an earlier `up`
    db_up
    dbd_up
}

accounting_down() {
    local pids=()
    if alive "$MN_DIR/run/slurmdbd.pid" slurmdbd; then pids+=("$(cat "$MN_DIR/run/slurmdbd.pid")"); fi
    stop_pids 100 "${pids[@]}"
    pids=()
    if alive "$MN_DIR/db/mariadb.pid" mariadbd; then pids+=("$(cat "$MN_DIR/db/mariadb.pid")"); fi
    stop_pids 300 "${pids[@]}"
    rm -rf "$MN_DIR/db" "$MN_DIR/run/slurmdbd.pid" "$MN_DIR/etc/slurmdbd.conf" "$MN_DIR/etc/db.pass"
}

# ---------------------------------------------------------------- daemons
munge_up() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
    mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
    chmod 0400 /etc/munge/munge.key
    runuser -u munge -- munged 2>/dev/null || munged --force
    for _ in $(seq 1 50); do
        if [ -s /run/munge/munged.pid ]; then break; fi
        sleep 0.1
    done
    cp /run/munge/munged.pid "$MN_DIR/run/munged.ours"   # we started it: `down` stops it
    munge -n | unmunge >/dev/null
}

ctld_up() {
    alive "$MN_DIR/run/slurmctld.pid" slurmctld && return 0
    SLURM_CONF="$CONF" slurmctld -f "$CONF" -i
}

slurmd_up() {
    local i="$1" ns="$MN_NS_PREFIX$1"
    alive "$MN_DIR/run/slurmd-node$i.pid" slurmd && return 0
    rm -rf "$MN_DIR/spool/node$i" "$MN_DIR/log/slurmd-node$i.log"
    mkdir -p "$MN_DIR/spool/node$i"
    # Own netns (IP), own UTS ns (hostname nodeN), own mount ns (node's /etc/hosts and
    # /etc/resolv.conf bound over the host's). Not `ip netns exec`: it remounts /sys, which
    # hides /sys/fs/cgroup, and slurmd 22.05 then dies ("Unable to initialize cgroup plugin")
    # even with proctrack/linuxproc + task/none. slurmd daemonizes and stays in all three.
    nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private -- sh -c "
        mount --bind /etc/netns/$ns/hosts /etc/hosts &&
        mount --bind /etc/netns/$ns/resolv.conf /etc/resolv.conf &&
        hostname node$i &&
        SLURM_CONF='$CONF' exec taskset -c '$MN_ALL_CPUS' slurmd -f '$CONF' -N node$i"
}

cluster_running() {
    alive "$MN_DIR/run/slurmctld.pid" slurmctld
}

wait_idle() {
    local n="$1" up=0 deadline=$((SECONDS + ${MN_UP_TIMEOUT:-60}))
    while [ "$SECONDS" -lt "$deadline" ]; do
        up="$(SLURM_CONF="$CONF" timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | grep -cE ' (idle|mixed|allocated)$' || true)"
        [ "$up" -ge "$n" ] && return 0
        sleep 0.2
    done
    log "only $up of $n nodes came up; see $MN_DIR/log/"
    SLURM_CONF="$CONF" sinfo -N >&2 || true
    return 1
}

cmd_up() {
    local n="${1:-${MN_NODES:-2}}" i
    [ "$(id -u)" -eq 0 ] || { log "must run as root"; exit 1; }
    install_packages
    if cluster_running && [ "$(cat "$MN_DIR/nodes" 2>/dev/null)" != "$n" ]; then
        log "running with $(cat "$MN_DIR/nodes" 2>/dev/null) nodes, want $n: restarting"
        cmd_down
    fi
    if ! cluster_running; then
        # controller starts from nothing: no saved jobs/nodes from an earlier run
        rm -rf "$MN_DIR/state" "$MN_DIR/log/slurmctld.log"
    fi
    local before=""
    if cluster_running; then before="$(cat "$CONF" 2>/dev/null)"; fi
    net_up "$n"
    write_conf "$n"
    munge_up
    accounting_up
    if [ -n "$before" ] && [ "$(grep ^Accounting <<<"$before")" != "$(grep ^Accounting "$CONF")" ]; then
        log "accounting changed: restarting the controller (reconfigure does not change it)"
        stop_pids 100 "$(cat "$MN_DIR/run/slurmctld.pid")"
    elif [ -n "$before" ] && [ "$before" != "$(cat "$CONF")" ]; then
        log "slurm.conf changed: reconfiguring the running controller"
        SLURM_CONF="$CONF" scontrol reconfigure
    fi
    ctld_up
    for i in $(seq 1 "$n"); do slurmd_up "$i"; done
    wait_idle "$n"
    echo "export SLURM_CONF=$CONF" >"$MN_DIR/env"
    log "up: $n nodes (node1..node$n = $MN_NET.11..$MN_NET.$((10 + n))), controller $CTL_HOST($MN_NET.1):$MN_CTLD_PORT"
    [ "$MN_ACCOUNTING" = 1 ] && log "accounting: slurmdbd 127.0.0.1:$MN_DBD_PORT, MariaDB 127.0.0.1:$MN_DB_PORT, AccountingStorageEnforce=limits"
    echo "export SLURM_CONF=$CONF"
}

stop_pids() {   # stop_pids GRACE_TENTHS PID...: TERM them all, wait up to GRACE, then KILL
    local pid left tenths="$1"
    shift
    [ "$#" -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    for _ in $(seq 1 "$tenths"); do
        left=""
        for pid in "$@"; do
            # gone, or a zombie waiting for init to reap it, counts as stopped
            if [ -r "/proc/$pid/stat" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then left=1; fi
        done
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    kill -KILL "$@" 2>/dev/null || true
}

cmd_down() {
    local ns pid f pids=()
    if [ -s "$CONF" ] && alive "$MN_DIR/run/slurmctld.pid" slurmctld; then
        SLURM_CONF="$CONF" timeout 10 scancel --full -u root 2>/dev/null || true
        # let the jobs end (TERM now, KILL after KillWait) before the daemons go: a slurmd
        # with live steps ignores TERM for its whole grace time
        for _ in $(seq 1 80); do
            [ -z "$(SLURM_CONF="$CONF" timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
    # only the pids this script recorded
    for f in "$MN_DIR"/run/slurmd-*.pid; do
        if alive "$f" slurmd; then pids+=("$(cat "$f")"); fi
        rm -f "$f"
    done
    if alive "$MN_DIR/run/slurmctld.pid" slurmctld; then pids+=("$(cat "$MN_DIR/run/slurmctld.pid")"); fi
    rm -f "$MN_DIR/run/slurmctld.pid"
    stop_pids 100 "${pids[@]}"
    # anything still alive inside our node namespaces (job steps, slurmstepd, which ignores
    # TERM) is ours: TERM, 2 s grace, KILL
    pids=()
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${MN_NS_PREFIX}[0-9]+$" || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do pids+=("$pid"); done
    done
    stop_pids 20 "${pids[@]}"
    # munged only if this script started it (and that pid is still munged)
    if alive "$MN_DIR/run/munged.ours" munged; then stop_pids 50 "$(cat "$MN_DIR/run/munged.ours")"; fi
    rm -f "$MN_DIR/run/munged.ours"
    accounting_down
    net_down
    rm -rf "$MN_DIR/state" "$MN_DIR/spool"
    log "down (logs kept in $MN_DIR/log)"
}

cmd_status() {
    if cluster_running; then
        SLURM_CONF="$CONF" timeout 10 sinfo -N
    else
        echo "not running"
        return 1
    fi
}

# namespaces, bridges and daemons need root: CI's runner may be a sudoer instead
[ "$(id -u)" -eq 0 ] || exec sudo -E bash "$0" "$@"
case "${1:-up}" in
    up) cmd_up "${@:2}" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) echo "usage: $0 up [N] | down | status" >&2; exit 2 ;;
esac
