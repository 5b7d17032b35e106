#!/usr/bin/env bash
# Start a single-node Slurm cluster with accounting on this machine (root; no systemd needed):
# munge, MariaDB + slurmdbd (so sacct works), slurmctld, slurmd. Idempotent: a running cluster is
# left as it is. Packages: apt-get install munge slurmctld slurmd slurm-client slurmdbd mariadb-server
# Stop it with tests/slurm/down.sh. Facts behind every step: ../shared/notes/slurm-in-ci.md.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "slurm-up: needs root" >&2; exit 2; }
for b in munged mariadbd slurmdbd slurmctld slurmd sinfo; do
  command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || { echo "slurm-up: $b is not installed" >&2; exit 2; }
done
if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
  echo "slurm-up: a cluster is already up"; exit 0
fi
host=$(hostname -s)
# The node advertises at least 4 CPUs (SlurmdParameters=config_overrides) so that a 2-task cell of
# 2 CPUs per task fits on a 2-core CI machine; nothing is bound to cores here (task/none), so the
# tasks share the real cores, as any over-subscribed node would.
cpus=$(( $(nproc) < 4 ? 4 : $(nproc) ))
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
state=/var/lib/iocampaign-slurm   # marks what this script started, for down.sh
mkdir -p "$state" /var/log/slurm /var/spool/slurmctld /var/spool/slurmd

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

# 4. slurmctld and slurmd
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=ci
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
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
SlurmdParameters=config_overrides
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
/usr/sbin/slurmctld; echo slurmctld >> "$state/started"
/usr/sbin/slurmd; echo slurmd >> "$state/started"
# slurmctld keeps a node's state across restarts: a node left drained or down by an earlier crash
# (a full disk drains it: "SlurmdSpoolDir is full") is put back in service; the cluster is the tests' own
wait_for 30 slurmctld sinfo -h
for _ in $(seq 1 50); do
  case "$(sinfo -h -o %T 2>/dev/null)" in
    drain*|down*|fail*) scontrol update NodeName="${host}" State=RESUME >/dev/null 2>&1 || true; sleep 0.5 ;;
    idle*|mixed*|allocated*) break ;;
    *) sleep 0.2 ;;
  esac
done
wait_for 60 "the node" sh -c 'sinfo -h -o %T | grep -qE "^(idle|mixed)"'
wait_for 30 sacct sacct -n -X
echo "slurm-up: cluster 'ci' up on ${host} (${cpus} CPUs, ${mem_mb} MB)"
