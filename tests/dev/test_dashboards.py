"""The roles' Grafana dashboards: the shape Grafana provisions (a uid, a title,
a schema version, a Prometheus data source variable every panel uses), every
panel with a query, and every query well formed by promtool's own parser
(molecule/default checks each returns data from the lab's Prometheus)."""
import os
import subprocess
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import dashboards  # noqa: E402

FILES = dashboards.files()


def test_each_role_with_alerts_over_node_exporter_or_the_keeper_ships_one():
    assert [os.path.relpath(f, ROOT) for f in FILES] == ["roles/k3d_serverlb/files/grafana-dashboard.json",
                                                         "roles/tcp_drain/files/grafana-dashboard.json"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.split(os.sep)[-3])
def test_the_shape_grafana_provisions(path):
    d = dashboards.load(path)
    assert d["uid"].startswith("homelab-edge-") and d["title"].startswith("homelab.edge - ")
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
    variables = d["templating"]["list"]
    assert [(v["name"], v["type"], v["query"]) for v in variables] == [("datasource", "datasource", "prometheus")]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) and ids
    for p in d["panels"]:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p["description"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip(), p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.split(os.sep)[-3])
def test_every_query_parses(path, tmp_path):
    """promtool (the lab's monitor image) checks each query as the expression of a rule."""
    rules = tmp_path / "q.rules.yml"
    lines = ["groups:", "  - name: q", "    rules:"]
    for n, (title, ref, expr) in enumerate(dashboards.queries(dashboards.load(path))):
        lines += ["      - record: q:%d" % n, "        expr: '%s'" % expr.replace("'", "''")]
    rules.write_text("\n".join(lines) + "\n")
    if subprocess.run(["docker", "image", "inspect", "homelab-edge/monitor:lab"], capture_output=True).returncode:
        pytest.skip("the lab's monitor image is not built (lab/lab.sh setup)")
    out = subprocess.run(["docker", "run", "--rm", "-v", "%s:/r:ro" % tmp_path, "-w", "/r", "homelab-edge/monitor:lab",
                          "promtool", "check", "rules", "q.rules.yml"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
