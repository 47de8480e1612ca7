#!/usr/bin/env bash
# ceph-s3.sh - throw-away single-node Ceph cluster (1 mon, 1 memstore OSD, radosgw/beast)
# serving S3 on 127.0.0.1, for tests. Root, Debian 12, no systemd, no Docker.
#
#   ceph-s3.sh start [DIR]   install if missing, start, create S3 user, wait until ready;
#                            prints KEY=VALUE lines (also saved to DIR/env) on stdout
#   ceph-s3.sh stop  [DIR]   stop the daemons by PID and delete DIR (KEEP_DIR=1 keeps it)
#   ceph-s3.sh status [DIR]  exit 0 if the S3 endpoint answers
#
# Env: CEPH_S3_DIR (default $TMPDIR/ceph-s3), S3_PORT (default: a free port),
#      S3_ACCESS_KEY / S3_SECRET_KEY (default testkey/testsecret),
#      CEPH_S3_STORE=memstore|bluestore (default memstore: data in RAM, lost on stop),
#      CEPH_S3_STORE_BYTES (default 4 GiB; memstore capacity or sparse bluestore file size),
#      CEPH_S3_STOP_WAIT (seconds from SIGTERM to SIGKILL per daemon, default 10; radosgw
#      takes 4-5 s to exit on TERM, and a throw-away cluster does not need a clean stop).
set -euo pipefail

CMD=${1:-}
DIR=${2:-${CEPH_S3_DIR:-${TMPDIR:-/tmp}/ceph-s3}}
AK=${S3_ACCESS_KEY:-testkey}
SK=${S3_SECRET_KEY:-testsecret}
STORE=${CEPH_S3_STORE:-memstore}
STORE_BYTES=${CEPH_S3_STORE_BYTES:-4294967296}
STOP_WAIT=${CEPH_S3_STOP_WAIT:-10}
CONF=$DIR/ceph.conf
DAEMONS="client.rgw.a osd.0 mon.a"   # stop order

log() { echo "[ceph-s3 $(date +%T.%N | cut -c1-12)] $*" >&2; }
die() {
  log "ERROR: $*"; [ -d "$DIR/log" ] && tail -n 20 "$DIR"/log/*.log >&2
  [ "$CMD" = start ] && [ -f "$CONF" ] && stop_daemons  # leave nothing running after a failed start
  exit 1
}
py() { if [ -x /usr/bin/python3 ]; then /usr/bin/python3 "$@"; else python3 "$@"; fi; }
free_port() { py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ceph_() { timeout 60 ceph -c "$CONF" --connect-timeout 30 "$@"; }

ensure_installed() {
  if command -v radosgw >/dev/null && command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null; then
    return
  fi
  [ "$(id -u)" = 0 ] || die "radosgw/ceph-mon/ceph-osd missing and not root: apt-get install radosgw ceph-mon ceph-osd"
  log "installing radosgw ceph-mon ceph-osd from Debian (about 70 MB download, 270 MB on disk)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends radosgw ceph-mon ceph-osd >/dev/null 2>&1 \
    || die "apt-get install failed"
}

running() { # pid -> 0 if it exists and is not a zombie (PID 1 may reap late)
  [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}

pid_alive() { # name -> 0 if the daemon from DIR/run/<name>.pid is running
  local f="$DIR/run/$1.pid" pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  running "$pid" && grep -q -- "$CONF" "/proc/$pid/cmdline" 2>/dev/null
}

http_ready() { # url -> 0 when GET returns 200
  py - "$1" <<'EOF'
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

write_conf() {
  local fsid=$1 monp=$2 rgwp=$3
  cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$monp]
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc secure
run_dir = $DIR/run
admin_socket = $DIR/run/\$name.asok
pid_file = $DIR/run/\$name.pid
log_file = $DIR/log/\$name.log
mon_data = $DIR/mon/\$cluster-\$id
osd_data = $DIR/osd/\$cluster-\$id
osd_objectstore = $STORE
memstore_device_bytes = $STORE_BYTES
bluestore_block_path = $DIR/osd/block
bluestore_block_size = $STORE_BYTES
bluestore_block_create = true
bluestore_cache_size = 134217728
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_max_pg_per_osd = 1000
osd_crush_chooseleaf_type = 0
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
mon_data_avail_warn = 1
mon_data_avail_crit = 0
paxos_propose_interval = 0.01
paxos_min_wait = 0.001
[mon.a]
mon_initial_members = a
[client.rgw.a]
rgw_frontends = beast endpoint=127.0.0.1:$rgwp tcp_nodelay=1
rgw_data = $DIR/rgw
rgw_thread_pool_size = 64
rgw_dynamic_resharding = false
# reclaim deleted multipart/tail data after ~1 min instead of 2 h (memstore keeps data in RAM)
rgw_gc_obj_min_wait = 60
rgw_gc_processor_period = 60
EOF
}

start() {
  if [ -f "$DIR/env" ] && pid_alive client.rgw.a; then
    # shellcheck disable=SC1091
    . "$DIR/env"
    if http_ready "$S3_ENDPOINT"; then log "already running"; cat "$DIR/env"; return 0; fi
  fi
  stop_daemons
  ensure_installed
  local t0=$SECONDS fsid monp rgwp osd_uuid id i
  rm -rf "$DIR"
  mkdir -p "$DIR"/run "$DIR"/log "$DIR"/mon/ceph-a "$DIR"/osd/ceph-0 "$DIR"/rgw
  fsid=$(cat /proc/sys/kernel/random/uuid)
  monp=$(free_port)
  rgwp=${S3_PORT:-$(free_port)}
  write_conf "$fsid" "$monp" "$rgwp"

  log "mon on 127.0.0.1:$monp"
  monmaptool --create --addv a "[v2:127.0.0.1:$monp]" --fsid "$fsid" "$DIR/monmap" >/dev/null
  ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" || die "mon mkfs"
  ceph-mon -c "$CONF" -i a || die "mon start"
  ceph_ mon stat >/dev/null || die "mon not reachable"

  log "osd.0 ($STORE)"
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(ceph_ osd new "$osd_uuid") || die "osd new"
  [ "$id" = 0 ] || die "unexpected osd id $id"
  ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >"$DIR/log/osd-mkfs.out" 2>&1 || die "osd mkfs"
  ceph-osd -c "$CONF" -i 0 >>"$DIR/log/osd-mkfs.out" 2>&1 || die "osd start"
  for i in $(seq 1 120); do
    ceph_ osd stat -f json 2>/dev/null | grep -q '"num_up_osds":1' && break
    [ "$i" = 120 ] && die "osd did not come up"
    sleep 0.25
  done

  log "S3 user $AK"
  timeout 120 radosgw-admin -c "$CONF" user create --uid=test --display-name=test \
    --access-key="$AK" --secret-key="$SK" >/dev/null 2>"$DIR/log/radosgw-admin.err" || die "user create"

  log "radosgw on 127.0.0.1:$rgwp"
  radosgw -c "$CONF" -n client.rgw.a >"$DIR/log/rgw.out" 2>&1 || die "radosgw start"
  for i in $(seq 1 240); do
    http_ready "http://127.0.0.1:$rgwp/" && break
    pid_alive client.rgw.a || die "radosgw exited"
    [ "$i" = 240 ] && die "radosgw not ready after 60 s"
    sleep 0.25
  done
  cat >"$DIR/env" <<EOF
S3_ENDPOINT=http://127.0.0.1:$rgwp
AWS_ACCESS_KEY_ID=$AK
AWS_SECRET_ACCESS_KEY=$SK
AWS_DEFAULT_REGION=us-east-1
CEPH_S3_PIDS="$(for n in $DAEMONS; do cat "$DIR/run/$n.pid"; done | tr '\n' ' ' | sed 's/ $//')"
EOF
  log "ready in $((SECONDS - t0)) s"
  cat "$DIR/env"
}

stop_daemons() {
  local n pid i
  for n in $DAEMONS; do
    pid_alive "$n" || continue
    pid=$(cat "$DIR/run/$n.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 "$(py -c "print(max(1, int(float('$STOP_WAIT') * 20)))")"); do
      running "$pid" || break; sleep 0.05
    done
    if running "$pid"; then log "$n ($pid) ignored SIGTERM, killing"; kill -KILL "$pid" 2>/dev/null || true; fi
    log "stopped $n (pid $pid)"
  done
}

case "$CMD" in
  start) start ;;
  stop)
    [ -f "$CONF" ] || { log "nothing at $DIR"; exit 0; }
    stop_daemons
    [ "${KEEP_DIR:-0}" = 1 ] || rm -rf "$DIR"
    log "stopped" ;;
  status)
    [ -f "$DIR/env" ] || exit 1
    # shellcheck disable=SC1091
    . "$DIR/env"; http_ready "$S3_ENDPOINT" ;;
  *) echo "usage: $0 start|stop|status [DIR]" >&2; exit 2 ;;
esac
