#!/usr/bin/env bash
# The cold path, measured on this machine (CI's kind): what a fresh machine
# lacks is moved aside - the lab's cache, Go's module and build caches, pip's
# cache, the engine's and containerd's data, the runtime wrapper and
# /etc/docker/daemon.json - and the engine stopped; then, from a fresh clone
# of this checkout's HEAD with a copy of ../shared beside it, `lab/lab.sh
# setup` runs (or with --all `bash .ci/run`, as CI runs it), timed. With
# --plain the clone is a plain one, as a new user has it: nothing beside it
# (no ../shared, no $HOMELAB_EDGE_UPSTREAM), so autoheal's and the socket
# proxy's images cannot be had without a registry; the README's two commands
# run, timed each: `make demo`, then `make test`.
#
#   lab/cold.sh [--all | --plain] [--dir DIR]      (DIR: where the clone goes, default /work/cold)
#
# What it cannot take away: Debian's packages already installed (a fresh
# machine also fetches docker.io, debootstrap and the rest with apt-get: about
# a minute here) and the Go toolchain the machine image ships. The warm state
# is put back when the run fails; when it passes, the state it built is kept
# (the same inputs, so the same cache) and the warm copy deleted. It refuses
# to start while a Molecule scenario or a `make test` runs on this machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ALL=no PLAIN=no DIR=/work/cold
while [ $# -gt 0 ]; do
  case "$1" in
    --all) ALL=yes ;;
    --plain) PLAIN=yes ;;
    --dir) DIR=$2; shift ;;
    *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
  shift
done
CACHE=${HOMELAB_EDGE_CACHE:-/var/cache/homelab-edge}
SHARED=${HOMELAB_EDGE_SHARED:-$ROOT/../shared}
log() { printf '[cold] %s\n' "$*" >&2; }

if pgrep -f "molecule test" >/dev/null || pgrep -f "tests/run.sh" >/dev/null; then
  log "a Molecule scenario or tests/run.sh runs here: not now"; exit 1
fi
AWAY=(
  "$CACHE"
  "$(go env GOCACHE)"
  "$(go env GOMODCACHE)"
  "$HOME/.cache/pip"
  /var/lib/docker
  /var/lib/containerd
  /etc/docker/daemon.json
  /usr/local/libexec/homelab-edge-lab
)
stop_engine() {
  if docker info >/dev/null 2>&1; then
    docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1 || true
  fi
  pkill -TERM -x dockerd || true
  for _ in $(seq 1 120); do pgrep -x dockerd >/dev/null || break; sleep 0.5; done
  pkill -TERM -x containerd || true
  for _ in $(seq 1 60); do pgrep -x containerd >/dev/null || break; sleep 0.5; done
  # what a stopped engine leaves mounted under its data roots
  grep -o -E ' /var/lib/(docker|containerd)[^ ]*' /proc/mounts | sort -r | xargs -r -n 1 umount -l 2>/dev/null || true
}
put_back() {
  log "putting the warm state back"
  stop_engine
  local p
  for p in "${AWAY[@]}"; do
    [ -e "$p.warm" ] || continue
    chmod -R u+w "$p" 2>/dev/null || true
    rm -rf "$p"
    mv "$p.warm" "$p"
  done
}

log "stopping the engine and moving the warm state aside"
stop_engine
for p in "${AWAY[@]}"; do
  [ -e "$p.warm" ] && { log "$p.warm exists: an earlier run did not finish; put it back first"; exit 1; }
done
for p in "${AWAY[@]}"; do
  if [ -e "$p" ]; then mv "$p" "$p.warm"; fi
done
rm -rf "$DIR" && mkdir -p "$DIR"
git clone -q "$ROOT" "$DIR/main"
[ "$PLAIN" = yes ] || cp -r "$SHARED" "$DIR/shared"
log "cold run from $DIR/main ($(git -C "$DIR/main" log --oneline -1))$([ "$PLAIN" = yes ] && echo ", a plain clone: nothing beside it")"
timed() { # what, log, command...: runs it in the clone, says how long it took; its exit code
  local what=$1 out=$2 t0 rc=0; shift 2
  t0=$(date +%s)
  (cd "$DIR/main" && unset HOMELAB_EDGE_SHARED HOMELAB_EDGE_UPSTREAM && "$@" </dev/null >"$out" 2>&1) || rc=$?
  local took=$(( $(date +%s) - t0 ))
  log "$what: exit $rc, $((took / 60)) min $((took % 60)) s (log: $out)"
  return $rc
}
rc=0
if [ "$PLAIN" = yes ]; then
  timed "make demo (cold, plain clone)" "$DIR/demo.log" make demo || rc=$?
  [ $rc -ne 0 ] || timed "make test (after the demo, plain clone)" "$DIR/test.log" make test || rc=$?
elif [ "$ALL" = yes ]; then
  timed "bash .ci/run cold" "$DIR/ci.log" env CI=true bash .ci/run || rc=$?
else
  timed "lab/lab.sh setup cold" "$DIR/setup.log" bash lab/lab.sh setup || rc=$?
fi
if [ $rc -ne 0 ]; then
  put_back
  exit $rc
fi
log "deleting the warm copy (the state just built replaces it)"
for p in "${AWAY[@]}"; do
  [ -e "$p.warm" ] || continue
  chmod -R u+w "$p.warm" 2>/dev/null || true
  rm -rf "$p.warm"
done
