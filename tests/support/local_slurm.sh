# tests/support/local_slurm.sh — a real single-node Slurm (Debian's slurm-wlm, munge) under a
# work directory, for tests/cluster/slurm_cluster_test.sh and scripts/slurm_main_job.sh. Source
# it, define `fail MESSAGE` (exits), export SLURM_CONF="$WORK/slurm.conf", then:
#   local_slurm_start WORK   munged, slurmctld and slurmd as root on this host with their own
#                            ports, sockets and state under WORK; returns once the node is idle
#   local_slurm_stop WORK    every job cancelled, the daemons stopped, leftover processes that
#                            name WORK killed
# Slurm here: ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no cgroup plugins:
# these machines have cgroup v1 with cpu and freezer only); the node declared with 8 CPUs
# (SlurmdParameters=config_overrides) so a job's 5 tasks fit on 2 cores; AuthInfo
# cred_expire=10, so a requeued job starts again after about 10 s instead of 120.

local_slurm_stop() {
  local work="$1"
  # Jobs first (their steps run under slurmstepd, which outlives slurmd), then the daemons.
  if [[ -e "$work/slurmctld.pid" ]]; then
    scancel --full --signal=KILL --user=root 2>/dev/null
    scancel --user=root 2>/dev/null
    for _ in $(seq 20); do
      [[ -z "$(squeue -h 2>/dev/null)" ]] && break
      sleep 0.5
    done
  fi
  local pf pid
  for pf in slurmd slurmctld munged; do
    [[ -e "$work/$pf.pid" ]] || continue
    pid="$(cat "$work/$pf.pid")"
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    rm -f "$work/$pf.pid"
  done
  # Anything of ours a step left behind (dd-node processes name this work directory).
  for pid in $(pgrep -f -- "$work/" 2>/dev/null); do
    [[ $pid -ne $$ ]] && kill -KILL "$pid" 2>/dev/null
  done
}

local_slurm_start() {
  local work="$1"
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  host="$(hostname -s)"
  ctld_port="$(free_port)"
  slurmd_port="$(free_port)"
  head -c 128 /dev/urandom >"$work/munge.key" && chmod 600 "$work/munge.key"
  munged --socket="$work/munge.sock" --key-file="$work/munge.key" --pid-file="$work/munged.pid" \
    --log-file="$work/munged.log" --seed-file="$work/munge.seed" --force ||
    fail "munged did not start: $(tail -5 "$work/munged.log" 2>/dev/null)"
  cat >"$SLURM_CONF" <<CONF
ClusterName=ddtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge.sock,cred_expire=10
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MinJobAge=600
NodeName=$host CPUs=8 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start: $(tail -5 "$work/slurmctld.log")"
  slurmd -f "$SLURM_CONF" || fail "slurmd did not start: $(tail -5 "$work/slurmd.log")"
  for _ in $(seq 60); do
    [[ "$(sinfo -h -o %T 2>/dev/null)" == idle ]] && break
    sleep 0.5
  done
  [[ "$(sinfo -h -o %T)" == idle ]] ||
    fail "the node is not idle: $(sinfo 2>&1); $(tail -5 "$work/slurmd.log")"
  echo "slurm up: $(sinfo -h -o '%P %T %c CPUs %N')"
}
