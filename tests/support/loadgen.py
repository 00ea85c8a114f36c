"""What tests/support/dnsgen.py and tlsgen.py share around the lab's compiled
load generators: one Go module, loadgen_go (package core, and a command each,
cmd/dnsgen and cmd/tlsgen), built by lab/lab.sh's go_tool into
$HOMELAB_EDGE_CACHE/bin/<name>-<hash of its sources>, linked as <name>. A
binary is run only when the link names the build of this checkout's sources:
another build's figures would be another tool's. Here too: running one (pinned
to CPUs, under a hard time bound), reading its one JSON object, and the rules
both judges share."""
import hashlib
import json
import os
import subprocess

GO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loadgen_go")


class Missing(RuntimeError):
    """No compiled generator built from these sources."""


class Generator:
    """One generator of the module: `name` (its command, cmd/<name>, and its binary's name), `what` (how messages
    name it) and `missing` (the Missing class binary() raises)."""

    def __init__(self, name, what, missing=Missing):
        self.name, self.what, self.missing = name, what, missing

    def sources_hash(self):
        """The hash lab/lab.sh's go_tool names the binary by."""
        return sources_hash(self.name)

    def binary(self):
        """$HOMELAB_EDGE_CACHE/bin/<name>, when it is the build of the sources in this checkout; a binary of other
        sources is refused (raises `missing`), not run: its figures would be another generator's."""
        return binary(self.name, self.what, self.missing)

    def build(self):
        """The build (sources' hash) every result of binary() reports."""
        self.binary()
        return self.sources_hash()


def sources(name):
    """The files generator `name` is built from, as paths under GO_DIR in C order: go.mod (and go.sum), the
    package core and cmd/<name>, not the tests (lab/lab.sh's go_tool_sources)."""
    found = [n for n in os.listdir(GO_DIR) if n in ("go.mod", "go.sum")]
    for sub in ("core", os.path.join("cmd", name)):
        found += [os.path.join(sub, n) for n in os.listdir(os.path.join(GO_DIR, sub))
                  if n.endswith(".go") and not n.endswith("_test.go")]
    return sorted(found)


def sources_hash(name):
    """The hash go_tool names the binary by: sha256 of its sources catenated in C order, 12 hex digits."""
    h = hashlib.sha256()
    for n in sources(name):
        with open(os.path.join(GO_DIR, n), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def binary(name, what, missing):
    """$HOMELAB_EDGE_CACHE/bin/<name> when it is the build of its sources here; else raises `missing` (an exception
    class) saying what to run. `what` names the tool in that message."""
    bindir = os.path.join(os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge"), "bin")
    link, want = os.path.join(bindir, name), os.path.join(bindir, "%s-%s" % (name, sources_hash(name)))
    if not os.path.exists(link):
        raise missing("no compiled %s at %s: run `lab/lab.sh gobins` (needs go)" % (what, link))
    if os.path.realpath(link) != os.path.realpath(want):
        raise missing("%s is %s, built from other sources than %s (%s-%s): run `lab/lab.sh gobins`"
                      % (link, os.path.realpath(link), os.path.join(GO_DIR, "cmd", name), name, sources_hash(name)))
    return link


def build_command(name, out, build="dev"):
    """The `go build` (run in GO_DIR) of generator `name` into `out`, as go_tool runs it; `build` is the hash the
    binary reports."""
    return ["go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-X main.build=" + build, "-o", str(out),
            "./cmd/" + name]


def pinned(cmd, cpus):
    """`cmd` under taskset, pinned to `cpus` (a set; None or empty: as it is)."""
    if cpus:
        return ["taskset", "-c", ",".join(str(c) for c in sorted(cpus))] + cmd
    return cmd


def run_json(cmd, bound):
    """Runs a generator's command line (it prints one JSON object) for `bound` seconds at most; its object. A
    non-zero exit (a refused flag or target: 2) raises RuntimeError with its stderr."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=bound, check=False)
    if p.returncode:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    return json.loads(p.stdout)


def counts_text(counts):
    """{name: n} as "NAME n, NAME n" in name order (the Go core's CountsText)."""
    return ", ".join("%s %d" % kv for kv in sorted((counts or {}).items()))


def connection_rules(r, max_p99_lateness_s, max_cpu_share):
    """Why a connection generator's (tlsgen's, floodgen's) JSON output `r` is not a measurement of the target: the
    rules both share (the Go core's ConnValidity), each one way the generator set the figures; [] when none holds."""
    why = []
    if r["skipped_at_bound"]:
        why.append("%d connections skipped at the generator's bound (-max-open %d)"
                   % (r["skipped_at_bound"], r["max_open"]))
    if r["local_errors"]:
        why.append("%d connections the generator could not open (%s)"
                   % (r["local_errors"], counts_text(r.get("local_errno"))))
    p99 = r["lateness_p99_s"]
    if p99 is None or p99 >= max_p99_lateness_s:
        why.append("99th percentile lateness %s s (not under %s s)" % (p99, max_p99_lateness_s))
    cpu, cpus = r["user_s"] + r["system_s"], r.get("cpus") or 0
    if r["wall_s"] <= 0 or cpus < 1 or cpu >= max_cpu_share * cpus * r["wall_s"]:
        why.append("generator CPU %.3f s over %.3f s (not under %d %% of %d cores)"
                   % (cpu, r["wall_s"], 100 * max_cpu_share, cpus))
    if r["unfinished"]:
        why.append("%d connections still open past their deadline" % r["unfinished"])
    if r["stopped_at_bound"] or r["started"] + r["skipped_at_bound"] != r["planned"]:
        why.append("reached %d of %d planned (stopped at the hard bound)"
                   % (r["started"] + r["skipped_at_bound"], r["planned"]))
    return why


def own_verdict(out, why, required=True):
    """Why the generator's own verdict disagrees, added to `why` (the reasons the Python rule found): the rule has
    two copies, the binary's and the judge's, and both must pass. A binary that gave none fails when `required`."""
    if "valid" not in out:
        if required:
            why.append("the generator gave no verdict of its own")
    elif not why and out["valid"] is not True:
        why.append("the generator's own verdict: %s" % out.get("invalid_because"))
    return why
