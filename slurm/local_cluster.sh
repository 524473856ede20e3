#!/usr/bin/env bash
# slurm/local_cluster.sh start|stop|status
# A real one-node SLURM cluster on this machine (Debian's slurm-wlm and munge), for the tests
# marked `slurm` and for trying the SLURM profiles without a cluster. `.ci/run` calls `start`.
#
#   start   install slurm-wlm and munge with apt-get if missing, write /etc/slurm/slurm.conf
#           (one node named after `hostname` with this machine's CPUs and memory, one partition
#           `debug`), create a munge key if none exists, start munged, slurmctld and slurmd, and
#           wait (at most START_TIMEOUT_S, default 60 s) until the node accepts jobs.
#           Idempotent: a running cluster is left as it is.
#   stop    stop the daemons this script started (by the pids in their pid files).
#   status  print `sinfo` and exit 0 when the cluster accepts jobs.
#
# Settings that work in containers without systemd or cgroups: proctrack/linuxproc, task/none,
# select/cons_tres, SlurmUser=root, no accounting (submitit then prints harmless `sacct`
# warnings). Needs root (apt-get, /etc/slurm, daemons).
set -euo pipefail

action="${1:-start}"
conf_dir=/etc/slurm
state_dir=/var/spool/slurmctld
spool_dir=/var/spool/slurmd
log_dir=/var/log/slurm
run_dir=/run/slurm
timeout_s="${START_TIMEOUT_S:-60}"

log() { echo "local_cluster: $*" >&2; }

ready() {
  # the node answers and is idle, mixed or allocated (not down, drained or not responding)
  local state
  state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n1) || return 1
  case "$state" in
    idle | mixed | allocated | completing) return 0 ;;
    *) return 1 ;;
  esac
}

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  log "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
}

write_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  # RealMemory in MB as slurmd measures it, less 512 MB for the daemons
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  mem=$((mem > 1024 ? mem - 512 : mem))
  mkdir -p "$conf_dir" "$state_dir" "$spool_dir" "$log_dir" "$run_dir"
  cat >"$conf_dir/slurm.conf" <<EOF
# written by slurm/local_cluster.sh: a one-node cluster for tests
ClusterName=mbs-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued (preempted, timed-out) job waits before it may start
# again; the default 120 s would make every preemption test wait two minutes
AuthInfo=cred_expire=10
StateSaveLocation=$state_dir
SlurmdSpoolDir=$spool_dir
SlurmctldPidFile=$run_dir/slurmctld.pid
SlurmdPidFile=$run_dir/slurmd.pid
SlurmctldLogFile=$log_dir/slurmctld.log
SlurmdLogFile=$log_dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# jobs that ask for no memory get 1 GB per CPU (not the whole node), so tasks run side by side
DefMemPerCPU=1024
SchedulerType=sched/backfill
# schedule every 2 s (defaults 60 s and 30 s): a requeued task starts soon after it may
SchedulerParameters=sched_interval=2,bf_interval=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
# requeue: preempted or timed-out jobs that submitit requeues keep their job id
JobRequeue=1
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start_munge() {
  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    return
  fi
  mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating a munge key"
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge 2>/dev/null || true
  chmod 0400 /etc/munge/munge.key
  chmod 0700 /etc/munge
  if id munge >/dev/null 2>&1; then
    su -s /bin/sh munge -c munged 2>/dev/null || munged --force
  else
    munged --force
  fi
}

start() {
  if command -v sinfo >/dev/null && ready; then
    log "cluster already running"
    sinfo
    return 0
  fi
  install
  write_conf
  start_munge
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  local deadline=$((SECONDS + timeout_s))
  until ready; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "the node did not become ready within ${timeout_s}s; logs: $log_dir"
      sinfo -N -l >&2 || true
      tail -n 20 "$log_dir/slurmctld.log" "$log_dir/slurmd.log" >&2 || true
      return 1
    fi
    # a node left down by an earlier run comes back once its slurmd registers
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  sinfo
}

stop() {
  for pidfile in "$run_dir/slurmd.pid" "$run_dir/slurmctld.pid"; do
    if [ -s "$pidfile" ]; then
      kill "$(cat "$pidfile")" 2>/dev/null || true
    fi
  done
  if [ -s /run/munge/munged.pid ]; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
  fi
}

case "$action" in
  start) start ;;
  stop) stop ;;
  status) sinfo && ready ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
