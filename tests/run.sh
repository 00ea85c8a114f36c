#!/usr/bin/env bash
# The test suite. `tests/run.sh all` (what `make test` runs) = the lab's setup (lab/lab.sh setup), versions (of the lab's binaries and images), unit, mutations, traefik live (the real Traefik on the module's edits), lint,
# rules (promtool), sanity (the oldest and newest ansible-core; `sanity-all`: each supported one), build, publish (Galaxy's importer, ansible-builder, the changelog,
# the oldest target Python), compat (the oldest and newest ansible-core) and
# every Molecule scenario. Each step's result is counted;
# the last line says "N passed, N failed" and the exit code is non-zero when
# anything failed or nothing ran.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export HOMELAB_EDGE_CACHE=${HOMELAB_EDGE_CACHE:-/var/cache/homelab-edge}
eval "$(lab/lab.sh env)"   # tools, venv, and this checkout as the collection homelab.edge
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0 ANSIBLE_NOCOLOR=1
export MOLECULE_GLOB="molecule/*/molecule.yml"
# load tests hold thousands of sockets; a CI shell often starts at a soft limit of 1024
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
mkdir -p tests/output

passed=0 failed=0 failures=()
step() { # name, command...
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name"
  if "$@"; then
    passed=$((passed + 1)); echo "=== $name: passed ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failures+=("$name"); echo "=== $name: FAILED ($((SECONDS - t0)) s)"
  fi
}

versions() {
  # every lab binary reports the version the lab pins; every lab image names the versions inside it;
  # and the check itself (what it takes and refuses, whatever the binary writes after its version)
  python -m pytest -q -p no:cacheprovider tests/lab/test_lab_versions.py && lab/lab.sh versions
}

fresh_host() {
  # status on a VPS not yet set up (this machine, read in check mode): each line says what is missing
  python -m pytest -q -p no:cacheprovider tests/lab/test_status_fresh_host.py
}

scoped_revert() {
  # the revert puts back only ufw's part of the ruleset: real iptables in a network namespace, both ways
  python -m pytest -q -p no:cacheprovider tests/lab/test_revert_scoped.py
}

docker_nft() {
  # the nftables table ufw_connlimit hands over under Docker's nftables backend: real nft in network namespaces, both ways;
  # and its bounds on all sources together on the real iptables, a flood from 150 addresses, both ways
  python -m pytest -q -p no:cacheprovider tests/lab/test_docker_nft_rules.py tests/lab/test_total_bound_rules.py
}

docker29() {
  # Docker Engine 29 (moby v2, API 1.56) with systemd's limits in a lab host: its events, the keeper on them, fixed not capped
  python -m pytest -q -p no:cacheprovider tests/lab/test_docker29.py
}

interrupt() {
  # the controller killed at every task boundary of site.yml per group (nas, vps), in the apply and the undo, on
  # lab hosts with and without systemd: each next run converges, a further one changes nothing, the undo gives the
  # user's files back byte for byte, the VPS's way in is never cut (tests/support/interrupt.py; tests/output/interrupt/)
  python -m pytest -q -p no:cacheprovider -rs tests/lab/test_interrupt.py
}

synology() {
  # a Synology-shaped NAS (DSM's nginx on 80 and 443, Traefik's published on 8080 and 8443) behind a VPS forwarding to
  # 8443: site, status, diagnose, prove through 8443 with urls from Traefik's config, DSM's 443 refused
  python -m pytest -q -p no:cacheprovider tests/lab/test_synology.py
}

traefik_live() {
  # the real Traefik (v3 and v2, the lab's images) starts on what traefik_inflight writes into
  # guide configs of each kind (YAML, TOML, flags), its API shows the limit, its health check finds ping;
  # and the tunnel's total on the release binaries in a network namespace (many PROXY-protocol sources, the LAN), both ways
  python -m pytest -q -p no:cacheprovider tests/lab/test_traefik_live.py tests/lab/test_traefik_tunnel_live.py
}

unit() {
  # tests/unit (shipped: `build` runs it from the tarball too) and tests/dev (the demo's checks, the
  # test helpers, Molecule's files: only the checkout has them);
  # exit code 5 (no tests collected) is a failure here, as any other non-zero
  python -m pytest -q -p no:cacheprovider tests/unit tests/dev
}

mutations() {
  # plausible bugs, each applied to a copy: the test that must catch it fails
  python tests/mutations.py
}

lint() {
  ansible-lint --offline --profile production
}

rules() {
  # the roles' Prometheus rules as the roles write them (their defaults), checked and unit-tested
  # (tests/prometheus/*.test.yml: every alert firing on its fault, quiet beside it) by Debian's
  # promtool (the lab image homelab-edge/monitor); and the roles' Grafana dashboards against Grafana's
  # dashboard schema (tests/support/grafana_schema: grafana-foundation-sdk's strict decoding)
  local tmp; tmp=$(mktemp -d)
  python tests/support/prometheus_rules.py "$tmp" >/dev/null && cp tests/prometheus/*.test.yml "$tmp"/ &&
    docker run --rm -v "$tmp:/r:ro" -w /r homelab-edge/monitor:lab \
      sh -c 'promtool check rules *.rules.yml && promtool test rules *.test.yml' &&
    dashboards_schema "$tmp"
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

dashboards_schema() { # DIR (scratch): every shipped dashboard passes; a crafted broken one must not
  local checker="$1/grafana-schema"
  (cd tests/support/grafana_schema && retry_go build -o "$checker" .) || return 1
  "$checker" roles/*/files/grafana-dashboard.json || return 1
  python -c 'import json, sys; d = json.load(open(sys.argv[1])); d["panels"][0]["gridPos"]["bogus"] = 1; print(json.dumps(d))' \
    roles/k3d_serverlb/files/grafana-dashboard.json >"$1/broken.json"
  if "$checker" "$1/broken.json" >/dev/null; then echo "the schema check passed a dashboard with an unknown field"; return 1; fi
}

retry_go() { # go COMMAND...: up to three times (the module proxy over the network)
  local i
  for i in 1 2 3; do GOWORK=off GOFLAGS=-mod=mod go "$@" && return 0; sleep 5; done
  return 1
}

# The ansible-core versions homelab.edge supports (meta/runtime.yml: >=2.16; galaxy.yml's dependency ranges hold on
# each), oldest first, each with the Python its ansible-test runs on (2.20 and later need 3.12 on the controller)
SANITY_CORES="2.16:/usr/bin/python3.11 2.17:/usr/bin/python3.11 2.18:/usr/bin/python3.11 2.19:/usr/bin/python3.11
2.20:/root/.pyenv/versions/3.12*/bin/python3.12 2.21:/root/.pyenv/versions/3.12*/bin/python3.12"

sanity_venv() { # ansible-core VERSION, PYTHON: a cached venv with it and its ansible-test's own sanity requirements
  local v req pipv
  v=$(lab/lab.sh toolvenv "sanity-$1" "$2" "ansible-core==$1.*") || return 1
  if [ ! -f "$v/.sanity-requirements" ]; then
    req=$(echo "$v"/lib/python3*/site-packages/ansible_test/_data/requirements)
    # the pins of this ansible-test (pylint, voluptuous, yamllint, ...), as its --requirements would install them
    "$v/bin/pip" install -q $(for f in "$req"/sanity.*.txt; do printf -- '-r %s ' "$f"; done) >&2 || return 1
    touch "$v/.sanity-requirements"
  fi
  # the import test bootstraps pip in a venv with a script from a site outside the reachable registries:
  # our stand-in in its cache, under the pip version this ansible-test asks for
  for pipv in $(grep -h -o -E "pip='[0-9.]+'" "$v"/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | cut -d"'" -f2 | sort -u); do
    mkdir -p "$HOME/.ansible/test/cache"
    cp lab/get_pip_offline.py "$HOME/.ansible/test/cache/get_pip_${pipv//./_}.py"
  done
  echo "$v"
}

need_shellcheck() { # ansible-test skips its shellcheck test (with a warning only) where shellcheck is missing
  command -v shellcheck >/dev/null && return 0
  flock "$HOMELAB_EDGE_CACHE/.apt.lock" sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null' &&
    command -v shellcheck >/dev/null
}

sanity() { # ansible-core VERSION PYTHON
  # ansible-test sanity on the extracted tarball, as Galaxy and Automation Hub run it: what ships is
  # tested, the ignore file (tests/sanity/ignore-VERSION.txt) may name only shipped files (its `ignores` test
  # fails on any other), and the tarball's own tree is no git repository (ansible-test then reads every file under it)
  local core=$1 v py tmp tb rc log="$ROOT/tests/output/sanity-$1.log"
  need_shellcheck || { echo "no shellcheck (apt-get install shellcheck)"; return 1; }
  v=$(sanity_venv "$core" "$2") || return 1
  py=$("$v/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  tmp=$(mktemp -d)
  tb=$(tarball "$tmp") && mkdir -p "$tmp/ansible_collections/homelab/edge" &&
    tar -C "$tmp/ansible_collections/homelab/edge" -xzf "$tb" || { rm -rf "$tmp"; return 1; }
  # --local: the venv holds this ansible-test's sanity tools
  (cd "$tmp/ansible_collections/homelab/edge" && PATH="$v/bin:$PATH" &&
     "$v/bin/ansible-test" sanity --local --python "$py" >"$log" 2>&1)
  rc=$?
  grep -E '^(ERROR|FATAL)' "$log" | head -n 60
  echo "ansible-core $("$v/bin/python" -c 'from ansible.release import __version__; print(__version__)') on Python $py ($log)"
  rm -rf "$tmp"
  return $rc
}

sanity_cores() { # all|ends: a step per supported ansible-core, or the oldest and the newest only
  local cores; cores=$(echo $SANITY_CORES)
  [ "$1" = all ] || cores="${cores%% *} ${cores##* }"
  local c
  for c in $cores; do step "sanity ${c%%:*}" sanity "${c%%:*}" "${c#*:}"; done
}

build() {
  local out rc=0 f m; out=$(mktemp -d)
  ansible-galaxy collection build --force --output-path "$out" >/dev/null || rc=1
  tar -tzf "$out"/homelab-edge-*.tar.gz >"$out/files.txt" || rc=1
  # what an execution environment needs travels in the tarball
  for f in meta/execution-environment.yml meta/ee-requirements.txt meta/ee-bindep.txt meta/runtime.yml LICENSE; do
    grep -qx "$f" "$out/files.txt" || { echo "the tarball lacks $f"; rc=1; }
  done
  ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-galaxy collection install --offline --no-deps \
    -p "$out/installed" "$out"/homelab-edge-*.tar.gz >/dev/null || rc=1
  ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -l homelab.edge | tee "$out/doc.txt"
  # every module and filter of the tree is listed, and its whole doc renders (the YAML of each part parses)
  for m in plugins/modules/*.py; do
    m=$(basename "$m" .py)
    grep -q "^homelab.edge.$m " "$out/doc.txt" || { echo "ansible-doc does not list homelab.edge.$m"; rc=1; }
    ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc "homelab.edge.$m" >/dev/null || rc=1
  done
  ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -t filter -l homelab.edge | tee "$out/filters.txt"
  for f in plugins/filter/*.yml; do
    f=$(basename "$f" .yml)
    grep -q "^homelab.edge.$f " "$out/filters.txt" || { echo "ansible-doc does not list filter homelab.edge.$f"; rc=1; }
    ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -t filter "homelab.edge.$f" >/dev/null || rc=1
  done
  for r in roles/*/; do
    ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -t role "homelab.edge.$(basename "$r")" >/dev/null || rc=1
  done
  # the unit tests the tarball ships run from it alone (nothing of the checkout: not its path, not its files)
  (cd "$out/installed/ansible_collections/homelab/edge" &&
     ANSIBLE_COLLECTIONS_PATH="$out/installed" PYTHONPATH="$out/installed" PYTHONDONTWRITEBYTECODE=1 \
       python -m pytest -q -p no:cacheprovider tests/unit >"$out/unit.txt" 2>&1) ||
    { tail -n 30 "$out/unit.txt"; echo "the tarball's unit tests failed from the installed collection"; rc=1; }
  tail -n 1 "$out/unit.txt"
  rm -rf "$out"
  return $rc
}

# Development files that must never ship in the tarball (galaxy.yml's build_ignore)
DEV_FILES='^(Makefile|ansible\.cfg|\.ansible-lint|\.config/|\.ci/|\.gitignore|requirements-[a-z]+\.txt|site\.yml|tests/run\.sh|tests/mutations\.py|tests/support/|tests/lab/|tests/dev/|tests/output/|changelogs/\.plugin-cache\.yaml|inventories/lab/|molecule/|lab/|demo/|benchmarks/|ee/|docs/build/)'

tarball() { # output dir -> builds the collection there, prints the tarball's path
  ansible-galaxy collection build --force --output-path "$1" >/dev/null && ls "$1"/homelab-edge-*.tar.gz
}

# galaxy-importer's settings (galaxy_importer/config.py of the pinned importer): as Galaxy runs it, and as
# Automation Hub runs it for certified content - a version of 1.0.0 or more, one of the certification tags
# (the importer's REQUIRED_TAG_LIST; homelab.edge has networking and infrastructure), a changelog, every
# plugin's doc and ansible-lint's production profile. ansible-test is off in both:
# Automation Hub runs it in a container of its own (INFRA_OSD); here `tests/run.sh sanity` runs it on the same
# extracted tarball. flake8 (RUN_FLAKE8, off by default) stays off: it reads the filters' YAML docs as Python
# and selects both W503 and W504, which no line break around an operator satisfies.
IMPORTER_GALAXY='RUN_ANSIBLE_TEST = False
RUN_ANSIBLE_LINT = True'
IMPORTER_AUTOMATION_HUB='RUN_ANSIBLE_TEST = False
RUN_ANSIBLE_LINT = True
RUN_ANSIBLE_DOC = True
CHECK_CHANGELOG = True
CHECK_REQUIRED_TAGS = True
REQUIRE_V1_OR_GREATER = True'
# What the importer's log may say and still be clean:
# - every collection with a sanity ignore file gets that notice (tests/sanity/ignore-2.NN.txt: shipped files only);
# - the importer's ansible-lint sees only the collection itself, not the collections galaxy.yml depends on, so
#   their modules are unknown to its syntax check (`tests/run.sh lint` lints with them installed).
IMPORTER_EXPECTED="Ignore files skip ansible-test|syntax-check\[unknown-module\]: couldn't resolve module/action 'community\.(docker|general)\."

importer() { # publish venv, tarball, name, settings: the importer accepts the tarball, its log clean
  local v=$1 tb=$2 name=$3 log="$ROOT/tests/output/galaxy-importer-$3.log" dir rc
  dir=$(mktemp -d)
  printf '[galaxy-importer]\n%s\n' "$4" >"$dir/importer.cfg"
  # its own ansible-doc and ansible-lint (the importer finds them on PATH)
  (cd "$dir" && PATH="$v/bin:$PATH" GALAXY_IMPORTER_CONFIG="$dir/importer.cfg" "$v/bin/python" -m galaxy_importer.main "$tb") \
    >"$log" 2>&1
  rc=$?
  rm -rf "$dir"
  if grep -E "^(ERROR|WARNING)" "$log" | grep -v -E "$IMPORTER_EXPECTED"; then rc=1; fi
  if [ $rc -ne 0 ] || ! grep -q "Importer processing completed successfully" "$log"; then
    echo "galaxy-importer with $name's settings did not accept the tarball cleanly ($log)"; return 1
  fi
}

ee_context() { # publish venv, collection root: the tarball as DIR/ee/homelab-edge.tar.gz, then ansible-builder create
  local v=$1 tmp tb; tmp=$(mktemp -d)
  tb=$(cd "$2" && tarball "$tmp") && cp "$tb" "$2/ee/homelab-edge.tar.gz" && rm -rf "$2/ee/context" &&
    (cd "$2" && "$v/bin/ansible-builder" create -f ee/execution-environment.yml --context ee/context >/dev/null)
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

ee() {
  # the execution environment's build context from this checkout (ee/context; `ansible-builder build` with
  # the same arguments builds the image, with a registry)
  local v; v=$(lab/lab.sh toolvenv publish /usr/bin/python3 $(sed 's/#.*//' requirements-publish.txt)) || return 1
  ee_context "$v" "$ROOT" && echo "ee: ee/context (homelab.edge $(version) as ee/homelab-edge.tar.gz)"
}

version() { # galaxy.yml's version
  sed -n 's/^version: *//p' galaxy.yml
}

publish() {
  # what Galaxy, Automation Hub and AWX check, with their own tools (requirements-publish.txt, a venv of its own)
  local v out tb rc=0 f n
  v=$(lab/lab.sh toolvenv publish /usr/bin/python3 $(sed 's/#.*//' requirements-publish.txt)) || return 1
  out=$(mktemp -d)
  tb=$(tarball "$out") || return 1
  tar -tzf "$tb" >"$out/files.txt"
  if grep -E "$DEV_FILES" "$out/files.txt"; then echo "the tarball ships the development files above"; rc=1; fi
  for f in LICENSE README.md meta/runtime.yml meta/execution-environment.yml meta/ee-requirements.txt meta/ee-bindep.txt \
           docs/docsite/links.yml $(cd roles && ls -d */ | sed 's|/$|/README.md|; s|^|roles/|'); do
    grep -qx "$f" "$out/files.txt" || { echo "the tarball lacks $f"; rc=1; }
  done
  importer "$v" "$tb" galaxy "$IMPORTER_GALAXY" || rc=1
  importer "$v" "$tb" automation-hub "$IMPORTER_AUTOMATION_HUB" || rc=1
  # the execution environment (ee/), in a copy of the checkout: the tarball of galaxy.yml's version goes in
  mkdir -p "$out/tree"
  git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null |
    tar -C "$out/tree" -xf -
  ee_context "$v" "$out/tree" || rc=1
  grep -q "ansible-galaxy collection install .*-r requirements.yml" "$out/tree/ee/context/"*file || {
    echo "ansible-builder create: no collection install in the generated Containerfile"; rc=1; }
  f="$out/tree/ee/context/_build/collections/homelab-edge.tar.gz"
  n=$(tar -xzOf "$f" MANIFEST.json 2>/dev/null | python -c 'import json, sys; print(json.load(sys.stdin)["collection_info"]["version"])')
  [ "$n" = "$(version)" ] || {
    echo "ansible-builder create: the build context holds homelab.edge '$n', not $(version) (ee/requirements.yml names collections/homelab-edge.tar.gz?)"; rc=1; }
  grep -q "collections/homelab-edge.tar.gz" ee/requirements.yml || { echo "ee/requirements.yml does not name collections/homelab-edge.tar.gz"; rc=1; }
  # no file names a tarball of another version (the execution environment's, the install line's)
  if grep -n -E "homelab-edge-[0-9][^ ]*\.tar\.gz" README.md ee/*.yml galaxy.yml Makefile | grep -v -F "homelab-edge-$(version).tar.gz"; then
    echo "the lines above name a tarball of another version than $(version)"; rc=1
  fi
  mkdir -p "$out/inst"
  ansible-galaxy collection install --force --offline --no-deps -p "$out/inst" "$tb" >/dev/null 2>&1
  "$v/bin/ansible-builder" introspect --sanitize "$out/inst" >"$out/introspect.txt" 2>/dev/null
  for f in "docker>=" "openssh-client"; do
    grep -q "$f" "$out/introspect.txt" || { echo "ansible-builder introspect: homelab.edge does not bring $f"; rc=1; }
  done
  # the changelog (and a release of galaxy.yml's version in it) and the oldest target Python claimed (README: 3.8, a Synology NAS)
  "$v/bin/antsibull-changelog" lint || rc=1
  "$v/bin/python" -c 'import sys, yaml; sys.exit(sys.argv[1] not in yaml.safe_load(open("changelogs/changelog.yaml"))["releases"])' "$(version)" ||
    { echo "changelogs/changelog.yaml has no release $(version) (antsibull-changelog release)"; rc=1; }
  "$v/bin/vermin" -t=3.8- --no-tips --violations --eval-annotations plugins/ || { echo "plugins/ needs a Python newer than 3.8"; rc=1; }
  rm -rf "$out"
  return $rc
}

docs() {
  # the docs site, offline (antsibull-docs, Sphinx): docs/build/build/html/index.html
  local v; v=$(lab/lab.sh toolvenv publish /usr/bin/python3 $(sed 's/#.*//' requirements-publish.txt)) || return 1
  # docs/docsite/links.yml against its schema, every plugin's and role's docs and what they reference, as
  # antsibull-docs lints a collection (community.docker and community.general as the ansible package bundles them)
  ANSIBLE_COLLECTIONS_PATH="$ANSIBLE_COLLECTIONS_PATH:$(echo "$VIRTUAL_ENV"/lib/python3*/site-packages)" PATH="$v/bin:$PATH" \
    antsibull-docs lint-collection-docs --plugin-docs . || { echo "antsibull-docs lint-collection-docs found the above"; return 1; }
  rm -rf docs/build && mkdir -p docs/build
  PATH="$v/bin:$PATH" antsibull-docs sphinx-init --use-current --dest-dir docs/build --fail-on-error \
    --squash-hierarchy --project homelab.edge homelab.edge >/dev/null || return 1
  # no intersphinx: its inventories are on sites this machine does not reach
  # and so no -W: links into Ansible's and other collections' docs stay unresolved; any other warning fails
  sed -i "s/'sphinx.ext.intersphinx', //; /^intersphinx_mapping = {/,/^}/d" docs/build/conf.py
  sed -i "s/ -W --keep-going//" docs/build/build.sh
  PATH="$v/bin:$PATH" bash docs/build/build.sh >"$ROOT/tests/output/docs.log" 2>&1 || { tail -n 20 "$ROOT/tests/output/docs.log"; return 1; }
  if grep -E "WARNING|ERROR" "$ROOT/tests/output/docs.log" | \
       grep -v -E "undefined label: '(common_return_values|ansible_configuration_settings|ansible_collections\.(ansible|community)\.)"; then
    echo "the docs build warned about the lines above"; return 1
  fi
  for m in plugins/modules/*.py; do
    [ -f "docs/build/build/html/$(basename "$m" .py)_module.html" ] || { echo "no docs page for $m"; return 1; }
  done
  echo "docs: docs/build/build/html/index.html"
}

# The ends of the supported range with the `ansible` package a user of each has (tests/support/ansible_bundles.yml
# says what each bundles): CORE:PYTHON
COMPAT_OLDEST="2.16:/usr/bin/python3.11"
COMPAT_NEWEST="2.21:/root/.pyenv/versions/3.13*/bin/python3.13"

bundle() { # CORE KEY: a value of that core's row of tests/support/ansible_bundles.yml (ansible, community.docker, ...)
  python - "$@" <<'PY'
import sys, yaml
row = next(r for r in yaml.safe_load(open("tests/support/ansible_bundles.yml")) if r["core"] == sys.argv[1])
value = row[sys.argv[2]]
print(value["version"] if isinstance(value, dict) else value)
PY
}

bundle_venv() { # CORE PYTHON: a cached venv with that core's ansible package, as its user installs it
  lab/lab.sh toolvenv "bundle-$1" "$2" "ansible==$(bundle "$1" ansible)" pytest
}

bundled() { # VENV NAME: the version of collection NAME (community.docker) in that venv's ansible package
  python -c 'import json, sys; print(json.load(open(sys.argv[1]))["collection_info"]["version"])' \
    "$(echo "$1"/lib/python3*/site-packages)/ansible_collections/${2/.//}/MANIFEST.json"
}

bundle_collections() { # CORE:PYTHON: a collections path with that core's bundle's community.docker and community.general
  local core=${1%%:*} v d c; v=$(bundle_venv "$core" "${1#*:}") || return 1
  d="$HOMELAB_EDGE_CACHE/collections-ansible-$(bundle "$core" ansible)"
  mkdir -p "$d/ansible_collections/community"
  for c in docker general library_inventory_filtering_v1; do
    ln -sfn "$(echo "$v"/lib/python3*/site-packages)/ansible_collections/community/$c" "$d/ansible_collections/community/$c"
  done
  echo "$d"
}

in_use() { # NAME: the version of collection NAME a playbook run here loads (the first found in Ansible's search order)
  ansible-galaxy collection list "$1" --format json 2>/dev/null | python -c 'import json, sys
print(next(v[sys.argv[1]]["version"] for v in json.load(sys.stdin).values() if sys.argv[1] in v))' "$1"
}

compat() { # ansible-core VERSION PYTHON: with that core's ansible package, the built tarball installed as README says
  # (offline, the dependencies the bundle's), the unit tests, every doc, --syntax-check of every playbook; and where the
  # dependencies are missing, the message README quotes
  local core=$1 py=$2 v out tb rc=0 m c want
  v=$(bundle_venv "$core" "$py") || return 1
  out=$(mktemp -d)
  tb=$(tarball "$out") || return 1
  for c in community.docker community.general; do
    want=$(bundle "$core" "$c")
    [ "$(bundled "$v" "$c")" = "$want" ] ||
      { echo "ansible $(bundle "$core" ansible) bundles $c $(bundled "$v" "$c"), tests/support/ansible_bundles.yml says $want"; rc=1; }
  done
  # a new user's HOME and environment (not this checkout as homelab.edge); no Galaxy: the dependencies must be found
  # installed, in the bundle's versions
  (cd "$out" && env -u ANSIBLE_COLLECTIONS_PATH HOME="$out/home" "$v/bin/ansible-galaxy" collection install --offline \
     -p "$out/c" "$tb") >"$out/install.txt" 2>&1 ||
    { cat "$out/install.txt"; echo "the offline install failed with ansible $(bundle "$core" ansible)"; rc=1; }
  for c in community.docker community.general; do
    grep -q "'$c:$(bundle "$core" "$c")' is already installed" "$out/install.txt" ||
      { cat "$out/install.txt"; echo "the install did not take $c $(bundle "$core" "$c") from the bundle"; rc=1; }
  done
  # the dependencies missing (a controller without the ansible package: its collections left unscanned here)
  (cd "$out" && env -u ANSIBLE_COLLECTIONS_PATH HOME="$out/home" ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false \
     "$v/bin/ansible-galaxy" collection install --offline -p "$out/none" "$tb") >"$out/missing.txt" 2>&1 &&
    { echo "the install went through without its dependencies"; rc=1; }
  m=$(python -c 'import sys, yaml; print(yaml.safe_load(open("galaxy.yml"))["dependencies"]["community.docker"])')
  for c in "Could not satisfy the following requirements:" "* community.docker:$m (dependency of homelab.edge:"; do
    grep -q -F -- "$c" "$out/missing.txt" && grep -q -F -- "$c" README.md ||
      { cat "$out/missing.txt"; echo "README's message for missing dependencies is not what ansible-galaxy prints: $c"; rc=1; }
  done
  "$v/bin/python" -m pytest -q -p no:cacheprovider tests/unit | tail -n 1 || rc=1
  for m in plugins/modules/*.py; do
    ANSIBLE_COLLECTIONS_PATH="$out/c" "$v/bin/ansible-doc" "homelab.edge.$(basename "$m" .py)" >/dev/null || rc=1
  done
  for m in plugins/filter/*.yml; do
    ANSIBLE_COLLECTIONS_PATH="$out/c" "$v/bin/ansible-doc" -t filter "homelab.edge.$(basename "$m" .yml)" >/dev/null || rc=1
  done
  for m in roles/*/; do
    ANSIBLE_COLLECTIONS_PATH="$out/c" "$v/bin/ansible-doc" -t role "homelab.edge.$(basename "$m")" >/dev/null || rc=1
  done
  for m in playbooks/*.yml; do
    m=$(basename "$m" .yml)
    (cd "$out" && HOME="$out/home" ANSIBLE_COLLECTIONS_PATH="$out/c" "$v/bin/ansible-playbook" --syntax-check \
       -i "$ROOT/inventories/example/hosts.yml" "homelab.edge.$m" >/dev/null) || { echo "syntax-check homelab.edge.$m"; rc=1; }
  done
  echo "ansible $(bundle "$core" ansible) (ansible-core $("$v/bin/python" -c 'from ansible.release import __version__; print(__version__)'),"\
       "community.docker $(bundled "$v" community.docker), community.general $(bundled "$v" community.general)) on $("$v/bin/python" -V)"
  rm -rf "$out"
  return $rc
}

compat_ends() {
  step "ansible-core ${COMPAT_OLDEST%%:*} (oldest), its ansible package" compat "${COMPAT_OLDEST%%:*}" "${COMPAT_OLDEST#*:}"
  step "ansible-core ${COMPAT_NEWEST%%:*} (newest), its ansible package" compat "${COMPAT_NEWEST%%:*}" "${COMPAT_NEWEST#*:}"
}

# Scenarios run with the community.docker and community.general of the oldest or the newest supported core's ansible
# package (bundle_collections) in front of the lab venv's (ansible 12: the middle of the range), on the lab's
# ansible-core; the others with the lab venv's. SCENARIO:CORE
DEPS_SCENARIOS="nas:${COMPAT_NEWEST%%:*} default:${COMPAT_OLDEST%%:*}"

scenario() {
  # Where the lab lacks an upstream image (a plain clone without a registry: lab/upstream_images.py), the part
  # of the site that runs it is skipped by tag and the tests that need it skip themselves, saying why.
  # One run of a scenario at a time (step plain runs nas's hosts too)
  local skip; skip=$(python lab/upstream_images.py skip-tags) || return 1
  local deps="" core="" c e
  for e in $DEPS_SCENARIOS; do [ "${e%%:*}" = "$1" ] && core=${e#*:}; done
  if [ -n "$core" ]; then
    for e in "$COMPAT_OLDEST" "$COMPAT_NEWEST"; do [ "${e%%:*}" = "$core" ] && deps=$(bundle_collections "$e"); done
    [ -n "$deps" ] || { echo "no collections of ansible-core $core's ansible package for $1"; return 1; }
  fi
  ( if [ -n "$skip" ]; then export ANSIBLE_SKIP_TAGS="${ANSIBLE_SKIP_TAGS:+$ANSIBLE_SKIP_TAGS,}$skip"; fi
    set -o pipefail
    {
      if [ -n "$deps" ]; then export ANSIBLE_COLLECTIONS_PATH="$deps:$ANSIBLE_COLLECTIONS_PATH"
        for c in community.docker community.general; do
          [ "$(in_use "$c")" = "$(bundle "$core" "$c")" ] ||
            { echo "$1 would load $c $(in_use "$c"), not ansible $(bundle "$core" ansible)'s $(bundle "$core" "$c")"; exit 1; }
        done
        echo "community.docker $(in_use community.docker) and community.general $(in_use community.general):" \
             "ansible $(bundle "$core" ansible)'s (ansible-core $core's package), $deps"
      fi
      flock "tests/output/.molecule-$1.lock" molecule test -s "$1"
    } 2>&1 | tee "tests/output/scenario-$1.log" )
}

plain() {
  # A plain clone's path (no autoheal or socket proxy image) on a machine that has them, hidden
  # (HOMELAB_EDGE_HIDE_UPSTREAM=1, lab/upstream_images.py): every scenario's and tests/lab's collection and skip
  # decisions (each test tests/support/image_bound.py finds image-bound skipped naming its images, every other
  # collected); then Molecule nas with autoheal's part skipped by tag - converge, the verifier on its marked
  # tests and those that adapt, destroy
  HOMELAB_EDGE_HIDE_UPSTREAM=1 python tests/support/image_bound.py plain &&
    python tests/support/image_bound.py scenario nas
}

skipped_for_images() { # what every scenario's pytest skipped for want of an image (its -rs lines), counted
  local n
  n=$(cat tests/output/scenario-*.log 2>/dev/null | sed -n -E "s/^SKIPPED \[([0-9]+)\] .*no image: .*/\1/p" |
      awk '{s += $1} END {print s + 0}')
  if [ "$n" -gt 0 ]; then
    echo "=== $n tests skipped: the lab has no image for them (lab/upstream_images.py missing):"
    python lab/upstream_images.py missing
  fi
}

# Scenarios that wait more than they work, then the VPS's (connection counts, no timed loads), run beside
# the others; k3d_serverlb (DNS loads) last in that stream, so that it overlaps only the end of the other.
# The two streams take about as long each (make test on 2026-12-03: k3d_engines 423, vps_systemd 217,
# vps_connlimit 1219, k3d_serverlb 624 s; default 1354, nas 1004, tcp_drain 117 s). No scenario restarts
# this machine's engine (k3d_engines restarts its hosts' own). Running the lab's own steps beside them too
# was slower (default 1969 s): 2 cores.
MOLECULE_BESIDE="k3d_engines vps_systemd vps_connlimit vps_nginx k3d_serverlb"

merge() { # pid, result file, log, title: wait for a group run in the background, print its log, count its steps
  wait "$1"
  echo "=== $4 ($3):"; cat "$3"
  local r; mapfile -t r <"$2" 2>/dev/null || r=()
  if [ ${#r[@]} -ge 2 ]; then
    passed=$((passed + r[0])) failed=$((failed + r[1])) failures+=("${r[@]:2}")
  else
    failed=$((failed + 1)) failures+=("$4 (no result)")
  fi
  rm -f "$2"
}

lab_setup() {
  # its output is kept: when it fails, its tail is printed again at the very end (a CI log is often cut)
  lab/lab.sh setup 2>&1 | tee tests/output/setup.log
}

bench() {
  for b in benchmarks/bench_*.py; do python "$b" || return 1; done
}

what=${1:-all}
case "$what" in
  versions) step versions versions ;;
  traefik-live) step "traefik live" traefik_live ;;
  fresh-host) step "fresh host" fresh_host ;;
  scoped-revert) step "scoped revert" scoped_revert ;;
  docker-nft) step "docker nft" docker_nft ;;
  docker29) step "docker 29" docker29 ;;
  plain) step plain plain ;;
  interrupt) step interrupt interrupt ;;
  synology) step synology synology ;;
  unit) step unit unit ;;
  mutations) step mutations mutations ;;
  lint) step lint lint ;;
  rules) step rules rules ;;
  sanity) sanity_cores ends ;;
  sanity-all) sanity_cores all ;;
  sanity:*) c=$(echo $SANITY_CORES | tr ' ' '\n' | grep "^${what#sanity:}:") ||
              { echo "no supported ansible-core ${what#sanity:} (SANITY_CORES)" >&2; exit 2; }
            step "sanity ${c%%:*}" sanity "${c%%:*}" "${c#*:}" ;;
  build) step build build ;;
  publish) step publish publish ;;
  docs) step docs docs ;;
  ee) step ee ee ;;
  compat) compat_ends ;;
  bench) step bench bench ;;
  molecule|all)
    rm -f tests/output/scenario-*.log
    if [ "$what" = all ]; then
      # The steps that need neither the engine nor the lab's images run beside the rest, at the lowest CPU
      # and I/O priority: they take the cores while the lab builds and Molecule waits, and stay out of the
      # way of its load tests. None writes into the checkout (docs does: it runs in the scenarios' stream below; the unit tests
      # hold short timed runs: in front too; mutations run theirs in copies). Their log is printed whole at the end.
      lab/lab.sh venv || exit 1
      beside=$(mktemp) beside_log=tests/output/beside.log
      ( renice -n 19 -p "$BASHPID" >/dev/null; ionice -c 3 -p "$BASHPID" 2>/dev/null || true
        passed=0 failed=0 failures=()
        step mutations mutations; step lint lint; sanity_cores ends; step build build; step publish publish
        compat_ends
        printf '%s\n' "$passed" "$failed" "${failures[@]}" >"$beside"
      ) </dev/null >"$beside_log" 2>&1 &
      beside_pid=$!
      step "lab setup" lab_setup
      # the unit tests hold short timed runs: alone in front; the lab's other short steps open the stream below
      step unit unit
    fi
    # Two streams of scenarios. The waiting ones (timers, a few hosts, light loads) run beside the
    # others: they end while the first scenario of the other stream still creates and converges its lab.
    # Under `all`, the lab's short steps (about 3 minutes, each in its own hosts or namespaces) come first
    # in that stream: they ran in front before, while nothing else used the second core.
    light=$(mktemp) light_log=tests/output/molecule-beside.log
    ( passed=0 failed=0 failures=()
      if [ "$what" = all ]; then
        step versions versions; step rules rules; step docs docs
        step "traefik live" traefik_live; step "fresh host" fresh_host; step "scoped revert" scoped_revert
        step "docker nft" docker_nft; step "docker 29" docker29; step interrupt interrupt; step synology synology
        # while the other stream runs default: the plain path's nas hosts never meet the real nas scenario's
        step plain plain
      fi
      for s in $MOLECULE_BESIDE; do step "molecule $s" scenario "$s"; done
      printf '%s\n' "$passed" "$failed" "${failures[@]}" >"$light"
    ) </dev/null >"$light_log" 2>&1 &
    light_pid=$!
    for s in molecule/*/molecule.yml; do
      s=$(basename "$(dirname "$s")")
      case " $MOLECULE_BESIDE " in *" $s "*) continue ;; esac
      step "molecule $s" scenario "$s"
    done
    merge "$light_pid" "$light" "$light_log" "the scenarios run beside the others"
    if [ "$what" = all ]; then
      merge "$beside_pid" "$beside" "$beside_log" "the steps run beside the rest"
      echo "=== all steps: $((SECONDS / 60)) min $((SECONDS % 60)) s"
    fi ;;
  molecule:*) step "molecule ${what#molecule:}" scenario "${what#molecule:}" ;;
  *) echo "usage: tests/run.sh all|versions|traefik-live|fresh-host|scoped-revert|docker-nft|docker29|plain|interrupt|synology|unit|mutations|lint|rules|sanity|sanity-all|sanity:2.NN|build|publish|docs|ee|compat|bench|molecule|molecule:NAME" >&2; exit 2 ;;
esac

echo
case "$what" in molecule*|all) skipped_for_images ;; esac
case " ${failures[*]} " in
  *" lab setup "*) echo "=== lab setup failed; the end of its output (tests/output/setup.log):"; tail -n 40 tests/output/setup.log ;;
esac
[ ${#failures[@]} -eq 0 ] || echo "failed steps: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
