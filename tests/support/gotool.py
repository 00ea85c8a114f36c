"""The lab's compiled tools: tests/support/<name>_go, built by lab/lab.sh's
go_tool into $HOMELAB_EDGE_CACHE/bin/<name>-<hash of its sources>, linked as
<name>. A binary is run only when the link names the build of this
checkout's sources: another build's figures would be another tool's."""
import hashlib
import os


def sources_hash(go_dir):
    """The hash go_tool names the binary by: sha256 of the Go sources (not the tests) catenated in C order, 12 hex
    digits."""
    names = sorted(n for n in os.listdir(go_dir) if n in ("go.mod", "go.sum")
                   or (n.endswith(".go") and not n.endswith("_test.go")))
    h = hashlib.sha256()
    for n in names:
        with open(os.path.join(go_dir, n), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def binary(name, go_dir, what, missing):
    """$HOMELAB_EDGE_CACHE/bin/<name> when it is the build of `go_dir`'s sources; else raises `missing` (an exception
    class) saying what to run. `what` names the tool in that message."""
    bindir = os.path.join(os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge"), "bin")
    link, want = os.path.join(bindir, name), os.path.join(bindir, "%s-%s" % (name, sources_hash(go_dir)))
    if not os.path.exists(link):
        raise missing("no compiled %s at %s: run `lab/lab.sh gobins` (needs go)" % (what, link))
    if os.path.realpath(link) != os.path.realpath(want):
        raise missing("%s is %s, built from other sources than %s (%s-%s): run `lab/lab.sh gobins`"
                      % (link, os.path.realpath(link), go_dir, name, sources_hash(go_dir)))
    return link
