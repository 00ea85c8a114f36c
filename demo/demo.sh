#!/usr/bin/env bash
# `make demo`: the main job on the local lab. Brings the lab up, shows the
# failure, runs `ansible-playbook site.yml` against it, shows the proof and a
# before/after table, then removes the lab (also on failure or Ctrl-C).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export HOMELAB_EDGE_CACHE=${HOMELAB_EDGE_CACHE:-/var/cache/homelab-edge}
CACHE=$HOMELAB_EDGE_CACHE
eval "$(lab/lab.sh env)"
COLL="$CACHE/collections/$(printf %s "$ROOT" | sha256sum | cut -c1-8)"  # one per checkout
mkdir -p "$COLL/ansible_collections/homelab"
ln -sfn "$ROOT" "$COLL/ansible_collections/homelab/edge"
export ANSIBLE_COLLECTIONS_PATH="$COLL"
exec python demo/demo.py "$@"
