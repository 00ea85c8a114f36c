"""The k3d ladder benchmark's own pure parts (benchmarks/bench_k3d_ladder.py): the cost part's variants of
homelab.edge's template change exactly the part they name, or refuse."""
import os
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import bench_k3d_ladder as bench  # noqa: E402

TEMPLATE = """stream {
  limit_conn_zone $protocol zone=homelab_edge_udp:1m;
  server {
    listen        53 udp;
    proxy_responses 1;
    proxy_timeout 5s;
    proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};
    limit_conn homelab_edge_udp 1024;
    limit_conn_log_level info;
  }
}
"""


def test_no_budget_drops_the_zone_and_the_limits_and_nothing_else():
    out = bench.variant_template(TEMPLATE, "no budget")
    assert "limit_conn" not in out
    assert out.count("\n") == TEMPLATE.count("\n") - 3 and "proxy_timeout 5s;" in out


def test_the_longer_timeout_changes_only_the_dns_servers_timeout():
    out = bench.variant_template(TEMPLATE, "10-s timeout")
    assert "proxy_timeout 10s;" in out and "proxy_timeout 5s;" not in out
    assert out.replace("10s;", "5s;") == TEMPLATE


def test_a_template_without_the_part_is_refused():
    with pytest.raises(RuntimeError, match="no no budget part"):
        bench.variant_template("stream {}\n", "no budget")
    with pytest.raises(ValueError):
        bench.variant_template(TEMPLATE, "something else")


K3D_TEMPLATE = """worker_processes auto;
stream {
  limit_conn_zone $protocol zone=homelab_edge_udp:1m;
  server {
    listen        {{ $port }} {{- if (eq $protocol "udp") }} udp{{- end -}};
  }
}
"""


@pytest.mark.parametrize("change, old, new", [
    ("one worker", "worker_processes auto;", "worker_processes 1;"),
    ("zone per worker", "limit_conn_zone $protocol", "limit_conn_zone $pid"),
    ("reuseport", "udp{{- end -}};", "udp reuseport{{- end -}};"),
])
def test_each_hypothesis_changes_its_one_line(change, old, new):
    out = bench.variant_template(K3D_TEMPLATE, change)
    assert out == K3D_TEMPLATE.replace(old, new) and out != K3D_TEMPLATE


def test_the_cpu_part_runs_in_abab_order():
    plan = bench.cpu_order(["A", "B"], (1000, 2000), 3)
    assert plan[:4] == [(1, 1000, "A"), (1, 1000, "B"), (1, 2000, "A"), (1, 2000, "B")]
    assert plan[4:8] == [(2, 2000, "B"), (2, 2000, "A"), (2, 1000, "B"), (2, 1000, "A")]
    assert len(plan) == 12 and plan[8] == (3, 1000, "A")
    assert [c[0] for c in bench.CPU_CONFIGS] == ["stock", "seed's fix", "homelab.edge", "homelab.edge, no budget"]
