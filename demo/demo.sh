#!/usr/bin/env bash
# `make demo`: the main job on the local lab. Brings the lab up, shows the
# failure, runs `ansible-playbook site.yml` against it, shows the proof and a
# before/after table, then removes the lab (also on failure or Ctrl-C).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export HOMELAB_EDGE_CACHE=${HOMELAB_EDGE_CACHE:-/var/cache/homelab-edge}
eval "$(lab/lab.sh env)"   # tools, venv, and this checkout as the collection homelab.edge
exec python demo/demo.py "$@"
