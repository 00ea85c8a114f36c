#!/usr/bin/env python
"""The lab images built from upstream programs - autoheal and the socket
proxy - that a machine may not have: a plain clone with no `../shared/upstream`
beside it and no registry to pull their published images from. `lab/lab.sh
setup` then leaves them out and writes one line for each under
$HOMELAB_EDGE_CACHE/upstream-missing/<name>: what is missing, why, and how to
provide it. The demo and the tests ask here what the lab lacks and leave out
the parts that need it, saying why; nowhere else decides that.

  python lab/upstream_images.py missing      one line per missing image (nothing when the lab has them all)
  python lab/upstream_images.py skip-tags    the site's tags to skip (for ANSIBLE_SKIP_TAGS), or nothing

HOMELAB_EDGE_HIDE_UPSTREAM=1 makes every upstream image count as missing, whatever
the engine holds: a machine that has them takes a plain clone's path (`tests/run.sh
plain`). The lab's hosts then get none of them either (lab/hosts.py asks here).
"""
import os
import subprocess
import sys

CACHE = os.environ.get("HOMELAB_EDGE_CACHE", "/var/cache/homelab-edge")
MISSING_DIR = os.path.join(CACHE, "upstream-missing")
# the part of the site (its tag) -> the lab images it runs (lab/lab.sh's names, homelab-edge/<name>:lab)
NEEDED_BY = {"autoheal": ("autoheal", "socket-proxy")}
SKIP_PREFIX = "no image: "
HIDE = "HOMELAB_EDGE_HIDE_UPSTREAM"


def image(name):
    return "homelab-edge/%s:lab" % name


def _present(name):
    try:
        return subprocess.run(["docker", "image", "inspect", image(name)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def hidden():
    return os.environ.get(HIDE, "") not in ("", "0")


def missing():
    """{lab image name: why it is missing} for each upstream image setup left out and the engine still lacks
    (an image loaded by hand since counts as there); every one of them where HOMELAB_EDGE_HIDE_UPSTREAM is set."""
    if hidden():
        return dict((n, "%s hidden (%s=1: the path of a machine that cannot have it)" % (image(n), HIDE))
                    for names in NEEDED_BY.values() for n in names)
    try:
        names = sorted(os.listdir(MISSING_DIR))
    except OSError:
        return {}
    out = {}
    for name in names:
        if not _present(name):
            with open(os.path.join(MISSING_DIR, name)) as f:
                out[name] = f.read().strip()
    return out


def skipped_tags(gone=None):
    """The site's tags whose part cannot run here: a part is left out when any image it runs is missing."""
    gone = missing() if gone is None else gone
    return [tag for tag, names in sorted(NEEDED_BY.items()) if any(n in gone for n in names)]


def reason(tag, gone=None):
    """Why the part `tag` is not run here (None when it can run): the pytest skip reason and the demo's "why".
    It names each missing image (homelab-edge/<name>:lab), whatever setup's line says."""
    gone = missing() if gone is None else gone
    lines = [gone[n] if image(n) in gone[n] else "%s: %s" % (image(n), gone[n]) for n in NEEDED_BY[tag] if n in gone]
    return SKIP_PREFIX + " / ".join(lines) if lines else None


def needs(tag):
    """A pytest mark for a test that needs the part `tag`: skipped with the reason where the lab lacks its image."""
    import pytest
    why = reason(tag)
    return pytest.mark.skipif(why is not None, reason=why or "")


def main(argv):
    if argv[1:] == ["missing"]:
        for name, line in sorted(missing().items()):
            print("%s: %s" % (name, line))
        return 0
    if argv[1:] == ["skip-tags"]:
        print(",".join(skipped_tags()))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
