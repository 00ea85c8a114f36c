"""Interrupted and undone anywhere (issue 62): `site.yml` per group on the lab's hosts, with and without systemd,
the controller killed at the start of every task that follows a change - in the apply and in the undo - then run
again: it converges (rc 0, the service answering), a further run changes nothing, the undo gives every file of the
user's back byte for byte and leaves nothing of ours; on the VPS a new SSH login and the tunnel's UDP port get
through after every kill and every run. The harness is tests/support/interrupt.py (its docstring says how); its
runs' output stays in tests/output/interrupt/.

Both lanes run side by side on hosts of their own (the NAS's and the VPS's); each test waits for its lane."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "lab")]
import interrupt  # noqa: E402


@pytest.fixture(scope="module")
def lanes():
    return interrupt.run_lanes(sorted(interrupt.LANES))


def check(result):
    assert not result["failures"], "\n".join(result["failures"])
    b = result["boundaries"]
    assert b["apply"] and b["undo"], b
    # every boundary of the recorded runs was killed at, in the apply and in the undo
    want = set([("present", interrupt.describe(x)) for x in b["apply"]] + [("absent", interrupt.describe(x)) for x in b["undo"]])
    assert sorted(want - set(tuple(k) for k in result["killed_at"])) == []
    # the tasks cut off while they run were
    assert len(result.get("in_flight", [])) == len(interrupt.LANES[result["lane"]].in_flight), result.get("in_flight")


def test_the_nas_roles_interrupted_at_every_boundary_converge_and_undo_byte_for_byte(lanes):
    """Where the lab has no autoheal image (lab/upstream_images.py), the lane leaves autoheal's tag out (said)."""
    check(lanes["nas"])


def test_the_vps_roles_interrupted_at_every_boundary_keep_the_way_in(lanes):
    check(lanes["vps"])
