#!/usr/bin/env bash
# Stop the cluster that tests/slurm/up.sh started: cancel what is queued, wait for an empty queue, then
# stop each daemon by the pid in its pid file (never by name), SIGKILL after 10 s; then remove the nodes'
# network namespaces (ending what still runs in them: the cluster's own job processes) and the bridge.
# Only what up.sh recorded as its own is touched: a namespace or link of another name, or of the same
# name that up.sh did not create, is left as it is.
set -uo pipefail
[ "$(id -u)" = 0 ] || { echo "slurm-down: needs root" >&2; exit 2; }
state=/var/lib/iocampaign-slurm
if command -v scancel >/dev/null && squeue -h >/dev/null 2>&1; then
  scancel --user=root 2>/dev/null || true
  for _ in $(seq 1 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
fi
stop_pid() {  # stop_pid <name> <pidfile>
  local pf=$2 pid
  [ -f "$pf" ] || return 0
  pid=$(cat "$pf")
  kill -0 "$pid" 2>/dev/null || { rm -f "$pf"; return 0; }
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 50); do
    # a stopped daemon can linger as a zombie until init reaps it: count that as stopped
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone)
    [ "$st" = gone ] || [ "$st" = Z ] && break
    sleep 0.2
  done
  kill -0 "$pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] && kill -KILL "$pid" 2>/dev/null
  echo "slurm-down: stopped $1 ($pid)"
}
started=$(cat "$state/started" 2>/dev/null || true)
for entry in $(echo "$started" | awk '$1 == "slurmd" && NF == 2 {print $2}'); do  # the namespaced nodes
  stop_pid "slurmd $entry" "/run/slurmd-$entry.pid"
done
for d in slurmd slurmctld slurmdbd mariadbd munged; do
  echo "$started" | grep -qx "$d" || continue
  case $d in
    slurmd) stop_pid slurmd /run/slurmd.pid ;;
    slurmctld) stop_pid slurmctld /run/slurmctld.pid ;;
    slurmdbd) stop_pid slurmdbd /run/slurmdbd.pid ;;
    mariadbd) stop_pid mariadbd /run/mysqld/mysqld.pid ;;
    munged) stop_pid munged /run/munge/munged.pid ;;
  esac
done
for ns in $(echo "$started" | awk '$1 == "netns" {print $2}'); do
  [ -e "/run/netns/$ns" ] || continue
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  for _ in $(seq 1 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
  # the veth pair goes with the namespace once nothing runs in it; removed here so that nothing waits on that
  ip link show "iocslurm-v${ns#iocslurm-n}" >/dev/null 2>&1 && ip link del "iocslurm-v${ns#iocslurm-n}"
  ip netns del "$ns" && echo "slurm-down: removed network namespace $ns"
  rm -rf "/var/spool/slurmd/${ns#iocslurm-}"
done
for br in $(echo "$started" | awk '$1 == "bridge" {print $2}'); do
  ip link show "$br" >/dev/null 2>&1 && ip link del "$br" && echo "slurm-down: removed bridge $br"
done
rm -f "$state/started"
