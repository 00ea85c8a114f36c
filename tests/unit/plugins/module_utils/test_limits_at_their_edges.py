"""Limits at their exact edges, where a comparison turned the other way once survived every other test (issue 51):
the smallest of nginx masters' hard open-file limits, and an in-flight share of exactly the blind share."""
import json

from ansible_collections.homelab.edge.plugins.module_utils.k3d_serverlb import container as k3d_container
from ansible_collections.homelab.edge.plugins.module_utils.traefik import inflight as traefik_inflight


class TwoMasters(object):
    """A load balancer mid-reload as read_state's one exec sees it: two nginx masters' hard limits, the old one's
    higher (a container recreated with a lower --ulimit while the old master still drains)."""

    def __init__(self, hard):
        self.hard = hard

    def exec_run(self, argv, demux=False):
        parts = ["template", "values", "conf", "1024\n", "\n".join(str(h) for h in self.hard) + "\n"]
        return type("R", (), {"exit_code": 0, "output": (k3d_container._SPLIT.join(parts).encode(), b"")})()


def test_the_hard_open_file_limit_is_the_smallest_a_master_has():
    """What nginx's workers can get at most is the lowest of what the masters may hand out, never the highest."""
    assert k3d_container.read_state(TwoMasters([1048576, 4096]), sleep=lambda s: None)["hard_limit"] == 4096
    assert k3d_container.read_state(TwoMasters([4096]), sleep=lambda s: None)["hard_limit"] == 4096
    assert k3d_container.read_state(TwoMasters([]), sleep=lambda s: None)["hard_limit"] is None


def access_log(counts):
    return [json.dumps({"ClientHost": host, "DownstreamStatus": 200}) for host, n in counts for dummy in range(n)]


def test_an_in_flight_share_of_exactly_the_blind_share_is_blind():
    """18 of 20 requests from one address is 90 %: Traefik sees a proxy; the bound is inclusive."""
    top, share, total = traefik_inflight.client_share(access_log([("10.0.0.1", 18), ("192.0.2.7", 1), ("192.0.2.8", 1)]))
    assert (top, total) == ("10.0.0.1", 20) and share == traefik_inflight.BLIND_SHARE
    assert traefik_inflight.is_blind(total, share)
    assert not traefik_inflight.is_blind(total, 0.85) and not traefik_inflight.is_blind(traefik_inflight.BLIND_MIN_REQUESTS - 1, 1.0)
