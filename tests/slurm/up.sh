#!/usr/bin/env bash
# Start a Slurm cluster with accounting on this machine (root; no systemd needed): munge, MariaDB +
# slurmdbd (so sacct works), slurmctld and its compute nodes. Idempotent: a running cluster of the
# same size is left as it is. Packages: apt-get install munge slurmctld slurmd slurm-client slurmdbd
# mariadb-server iproute2. Stop it with tests/slurm/down.sh.
#
#   up.sh              one node, named after this machine, at 127.0.0.1 (the default)
#   up.sh --nodes N    N nodes n1..nN (N >= 2): each a slurmd in its own network and UTS namespace
#                      (host name nK, address SUBNET.(10+K) on the bridge iocslurm0, which this script
#                      creates with SUBNET.1 for slurmctld and slurmdbd); the file system stays shared,
#                      as a cluster's parallel file system is. SUBNET: $IOCAMPAIGN_SLURM_SUBNET, default
#                      10.251.77; the script refuses a subnet this machine already routes, and a bridge
#                      or namespace of its names that it did not create. Nothing is routed off the bridge.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "slurm-up: needs root" >&2; exit 2; }
nodes=1
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=${2:-}; shift 2 || true ;;
    --nodes=*) nodes=${1#--nodes=}; shift ;;
    *) echo "slurm-up: unknown argument '$1' (usage: up.sh [--nodes N])" >&2; exit 2 ;;
  esac
done
case $nodes in ''|*[!0-9]*|0) echo "slurm-up: --nodes must be a whole number >= 1, not '$nodes'" >&2; exit 2 ;; esac
[ "$nodes" -le 16 ] || { echo "slurm-up: --nodes $nodes: at most 16 nodes on one machine" >&2; exit 2; }
subnet=${IOCAMPAIGN_SLURM_SUBNET:-10.251.77}
case $subnet in *[!0-9.]*|*.*.*.*) echo "slurm-up: IOCAMPAIGN_SLURM_SUBNET must be three octets like 10.251.77" >&2; exit 2 ;; esac
bridge=iocslurm0
for b in munged mariadbd slurmdbd slurmctld slurmd sinfo; do
  command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || { echo "slurm-up: $b is not installed" >&2; exit 2; }
done
[ "$nodes" = 1 ] || command -v ip >/dev/null || { echo "slurm-up: ip (iproute2) is not installed" >&2; exit 2; }
# The node advertises at least 4 CPUs (SlurmdParameters=config_overrides) so that a 2-task cell of
# 2 CPUs per task fits on a 2-core CI machine; nothing is bound to cores here (task/none), so the
# tasks share the real cores, as any over-subscribed node would.
cpus=$(( $(nproc) < 4 ? 4 : $(nproc) ))
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
state=/var/lib/iocampaign-slurm   # marks what this script started, for down.sh
mkdir -p "$state" /var/log/slurm /var/spool/slurmctld /var/spool/slurmd
touch "$state/started"
made() { grep -qxF "$1" "$state/started"; }  # made <entry>: this script created it (and down.sh has not removed it)
alive() {  # alive <pidfile>: its process runs (a zombie left by a killed daemon does not count)
  [ -f "$1" ] && [ -e "/proc/$(cat "$1")" ] && [ "$(awk '{print $3}' "/proc/$(cat "$1")/stat" 2>/dev/null)" != Z ]
}
start_node() {  # start_node <k>: node nK's slurmd in its network namespace and a UTS namespace of its own
  # (entered with nsenter, not `ip netns exec`, which would also give it a mount namespace and a fresh /sys)
  nsenter --net="/run/netns/iocslurm-n$1" unshare --uts sh -c "hostname n$1 && exec /usr/sbin/slurmd -N n$1"
}
wait_nodes() {  # every node responding and in service; a node left down or drained is resumed
  local names=$1 n states
  for _ in $(seq 1 100); do
    states=$(sinfo -h -N -o "%N %T" 2>/dev/null)
    for n in $names; do
      case "$(echo "$states" | awk -v n="$n" '$1 == n {print $2}')" in
        drain*|down*|fail*) scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true ;;
      esac
    done
    [ "$(echo "$states" | grep -cE ' (idle|mixed|allocated|completing)$')" = "$(echo $names | wc -w)" ] && return 0
    sleep 0.3
  done
  echo "slurm-up: the nodes did not come up in 30 s: $(sinfo -h -N -o '%N %T' | tr '\n' ' ')" >&2; return 1
}
host=$(hostname -s)
names=$( [ "$nodes" = 1 ] && echo "$host" || seq -f "n%g" 1 "$nodes" )

# A cluster already up: the same size is left as it is, but a node whose slurmd has died (a node that
# failed) is started again, as a rebooted node would be
if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated|completing|down|drain)'; then
  up=$(sinfo -h -N -o %N | sort -u | wc -l)
  if [ "$up" != "$nodes" ]; then
    echo "slurm-up: a cluster of $up node(s) is up, not $nodes: stop it first (tests/slurm/down.sh)" >&2; exit 2
  fi
  restarted=""
  for k in $( [ "$nodes" -gt 1 ] && seq 1 "$nodes"); do
    if made "slurmd n$k" && ! alive "/run/slurmd-n$k.pid"; then start_node "$k"; restarted="$restarted n$k"; fi
  done
  if [ -n "$restarted" ]; then
    wait_nodes "$names"
    echo "slurm-up: started the slurmd of$restarted again"
  fi
  echo "slurm-up: a cluster of $up node(s) is already up"; exit 0
fi

# 0. N >= 2: the nodes' network, checked before anything starts: the bridge and namespaces are this
# script's own (refused when something else by their names exists) and the subnet is unused here
if [ "$nodes" -gt 1 ]; then
  if ip link show "$bridge" >/dev/null 2>&1 && ! made "bridge $bridge"; then
    echo "slurm-up: a link named $bridge exists and was not made by this script: refusing to touch it" >&2; exit 2
  fi
  for k in $(seq 1 "$nodes"); do
    if [ -e "/run/netns/iocslurm-n$k" ] && ! made "netns iocslurm-n$k"; then
      echo "slurm-up: a network namespace iocslurm-n$k exists and was not made by this script: refusing to touch it" >&2
      exit 2
    fi
  done
  if ! made "bridge $bridge" && { ip -4 -o addr show | grep -qF " $subnet."; \
       ip -4 route show | grep -qE "^$subnet\.[0-9]+(/| )"; }; then
    echo "slurm-up: $subnet.0/24 is already in use on this machine: set IOCAMPAIGN_SLURM_SUBNET to a free /24" >&2; exit 2
  fi
fi

wait_for() {  # wait_for <seconds> <what> <command...>
  local t=$1 what=$2; shift 2
  for _ in $(seq 1 $((t * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "slurm-up: $what did not come up in ${t}s" >&2; return 1
}

# 1. munge, as the munge user
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  echo munged >> "$state/started"
fi
wait_for 10 munge sh -c 'munge -n | unmunge'

# 2. MariaDB, socket only
install -d -o mysql -g mysql /run/mysqld
if ! mysqladmin --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1; then
  [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  setsid /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
    --pid-file=/run/mysqld/mysqld.pid --skip-networking >/var/log/slurm/mariadb.log 2>&1 < /dev/null &
  echo mariadbd >> "$state/started"
fi
wait_for 30 mariadb mysqladmin --socket=/run/mysqld/mysqld.sock ping
mysql --socket=/run/mysqld/mysqld.sock <<'SQL'
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL

# 3. slurmdbd
cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=slurmpass
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
CONF
chmod 0600 /etc/slurm/slurmdbd.conf
if ! { [ -f /run/slurmdbd.pid ] && kill -0 "$(cat /run/slurmdbd.pid)" 2>/dev/null; }; then
  /usr/sbin/slurmdbd
  echo slurmdbd >> "$state/started"
fi
wait_for 30 slurmdbd bash -c 'exec 3<>/dev/tcp/127.0.0.1/6819'

# 4. the nodes' network (N >= 2): the bridge, and for each node a namespace joined to it by a veth pair
ctl_addr=127.0.0.1
if [ "$nodes" -gt 1 ]; then
  ctl_addr=$subnet.1
  if ! made "bridge $bridge"; then
    ip link add "$bridge" type bridge
    echo "bridge $bridge" >> "$state/started"
    ip addr add "$ctl_addr/24" dev "$bridge"
    ip link set "$bridge" up
  fi
  for k in $(seq 1 "$nodes"); do
    ns=iocslurm-n$k
    if ! made "netns $ns"; then
      ip netns add "$ns"
      echo "netns $ns" >> "$state/started"
      ip -n "$ns" link set lo up
      ip link add "iocslurm-v$k" type veth peer name eth0 netns "$ns"
      ip link set "iocslurm-v$k" master "$bridge" up
      ip -n "$ns" addr add "$subnet.$((10 + k))/24" dev eth0
      ip -n "$ns" link set eth0 up
    fi
  done
fi

# 5. slurmctld and slurmd
if [ "$nodes" = 1 ]; then
  node_lines="NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN"
  pidfile=/run/slurmd.pid; spool=/var/spool/slurmd; dlog=/var/log/slurm/slurmd.log
else
  node_lines=$(for k in $(seq 1 "$nodes"); do
    echo "NodeName=n$k NodeAddr=$subnet.$((10 + k)) CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN"; done)
  pidfile=/run/slurmd-%n.pid; spool=/var/spool/slurmd/%n; dlog=/var/log/slurm/slurmd-%n.log
  for k in $(seq 1 "$nodes"); do mkdir -p "/var/spool/slurmd/n$k"; done
fi
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=ci
SlurmctldHost=${host}(${ctl_addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=${spool}
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=${pidfile}
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=${dlog}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=${ctl_addr}
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
ReturnToService=2
MinJobAge=300
KillWait=5
# a killed step's processes may sit in a disk flush (a cold run's eviction) on the tests' shared, busy disk:
# the default 60 s to end them drained n1 once ("Kill task failed"), with no node left for the next cell;
# 180 s did too, with the suite beside a CPU hog and other tests' disk writes (176 s to end them)
UnkillableStepTimeout=600
SlurmdParameters=config_overrides
${node_lines}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
/usr/sbin/slurmctld; echo slurmctld >> "$state/started"
if [ "$nodes" = 1 ]; then
  /usr/sbin/slurmd; echo slurmd >> "$state/started"
else
  for k in $(seq 1 "$nodes"); do
    start_node "$k"
    echo "slurmd n$k" >> "$state/started"
  done
fi
# slurmctld keeps a node's state across restarts: a node left drained or down by an earlier crash
# (a full disk drains it: "SlurmdSpoolDir is full") is put back in service; the cluster is the tests' own
wait_for 30 slurmctld sinfo -h
wait_nodes "$names"
wait_for 30 sacct sacct -n -X
if [ "$nodes" = 1 ]; then
  echo "slurm-up: cluster 'ci' up on ${host} (${cpus} CPUs, ${mem_mb} MB)"
else
  echo "slurm-up: cluster 'ci' up: nodes $(echo $names) at $subnet.11-$((10 + nodes)) on $bridge (${cpus} CPUs, ${mem_mb} MB each)"
fi
