"""lab/upstream_images.py: which parts of the site the lab leaves out where an
upstream image could not be had (issue 49), and the guard that CI - which has
../shared/upstream beside the checkout - never leaves anything out."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "lab"))
import upstream_images  # noqa: E402

SHARED = os.environ.get("HOMELAB_EDGE_SHARED", os.path.join(ROOT, "..", "shared"))


def test_a_part_is_left_out_when_any_image_it_runs_is_missing():
    assert upstream_images.skipped_tags({}) == []
    assert upstream_images.skipped_tags({"socket-proxy": "why"}) == ["autoheal"]
    assert upstream_images.skipped_tags({"autoheal": "a", "socket-proxy": "b"}) == ["autoheal"]
    assert upstream_images.skipped_tags({"nas": "not an upstream image"}) == []


def test_the_reason_is_setups_own_line_for_each_missing_image():
    assert upstream_images.reason("autoheal", {}) is None
    why = upstream_images.reason("autoheal", {"autoheal": "homelab-edge/autoheal:lab not built: one",
                                              "socket-proxy": "homelab-edge/socket-proxy:lab not built: two"})
    assert why == "no image: homelab-edge/autoheal:lab not built: one / homelab-edge/socket-proxy:lab not built: two"


def test_the_reason_names_each_missing_image_whatever_setups_line_says():
    """The runtime guard: a test skipped for an image names it (a line of an older setup, or one edited by hand,
    that does not name it gets its name in front)."""
    why = upstream_images.reason("autoheal", {"autoheal": "not built", "socket-proxy": "homelab-edge/socket-proxy:lab gone"})
    assert why == "no image: homelab-edge/autoheal:lab: not built / homelab-edge/socket-proxy:lab gone"


def test_hidden_every_upstream_image_is_missing_and_named(tmp_path, monkeypatch):
    """HOMELAB_EDGE_HIDE_UPSTREAM=1: the plain clone's path on a machine that has the images (tests/run.sh plain)."""
    monkeypatch.setattr(upstream_images, "MISSING_DIR", str(tmp_path))
    monkeypatch.setattr(upstream_images, "_present", lambda name: True)
    monkeypatch.setenv(upstream_images.HIDE, "1")
    gone = upstream_images.missing()
    assert sorted(gone) == ["autoheal", "socket-proxy"]
    assert upstream_images.skipped_tags() == ["autoheal"]
    why = upstream_images.reason("autoheal")
    assert "homelab-edge/autoheal:lab" in why and "homelab-edge/socket-proxy:lab" in why and "HIDE_UPSTREAM" in why
    mark = upstream_images.needs("autoheal")
    assert mark.args == (True,) and mark.kwargs["reason"] == why
    monkeypatch.setenv(upstream_images.HIDE, "0")
    assert upstream_images.missing() == {} and upstream_images.needs("autoheal").args == (False,)


def test_missing_reads_setups_lines_and_counts_an_image_loaded_since_as_there(tmp_path, monkeypatch):
    monkeypatch.setattr(upstream_images, "MISSING_DIR", str(tmp_path))
    assert upstream_images.missing() == {}
    (tmp_path / "autoheal").write_text("homelab-edge/autoheal:lab not built: why\n")
    monkeypatch.setattr(upstream_images, "_present", lambda name: False)
    assert upstream_images.missing() == {"autoheal": "homelab-edge/autoheal:lab not built: why"}
    monkeypatch.setattr(upstream_images, "_present", lambda name: True)
    assert upstream_images.missing() == {}


def test_the_command_line_prints_the_tags_to_skip(tmp_path):
    env = dict(os.environ, HOMELAB_EDGE_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "lab", "upstream_images.py"), "skip-tags"], env=env,
                         capture_output=True, text=True, check=True)
    assert out.stdout == "\n"


def sources_beside():
    """The upstream sources the lab builds from: $HOMELAB_EDGE_UPSTREAM or ../shared/upstream."""
    for d in filter(None, [os.environ.get("HOMELAB_EDGE_UPSTREAM"), os.path.join(SHARED, "upstream")]):
        if all(os.path.isdir(os.path.join(d, n)) for n in ("docker-autoheal", "docker-socket-proxy")):
            return d
    return None


def engine_answers():
    try:
        return subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                              check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_where_the_images_can_be_had_nothing_is_left_out():
    """CI (CI=true, ../shared beside the checkout, the lab set up first) and any checkout with the sources beside it
    and the engine up have every upstream image: were setup to leave one out there, the tests that need it would
    skip unseen. This fails instead."""
    if not os.environ.get("CI") and (sources_beside() is None or not engine_answers()):
        pytest.skip("a plain clone without the upstream sources, or no engine: the lab may lack their images")
    assert sources_beside(), "CI runs with ../shared beside the checkout, but no upstream sources are at %s" % SHARED
    assert upstream_images.missing() == {}, upstream_images.missing()
    assert upstream_images.skipped_tags() == []
    absent = [n for names in upstream_images.NEEDED_BY.values() for n in names if not upstream_images._present(n)]
    assert not absent, "the sources are beside the checkout but the engine lacks %s: run lab/lab.sh setup" % absent
