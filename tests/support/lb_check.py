"""Judge a k3d load balancer from the outside: its rendered nginx.conf read
with crossplane (not the module's parser) and its workers' limits read from
/proc. Also the two variants the tests and benchmarks compare it with."""
import re

import nginx_conf

NGINX_CONF = "/etc/nginx/nginx.conf"


def read(container, path):
    rc, out = container.exec_run(["cat", path])
    assert rc == 0, out
    return out.decode()


def shortfalls(container, want):
    """What the running load balancer lacks of the fix (empty when fixed)."""
    s = nginx_conf.summary(read(container, NGINX_CONF))
    wc = s["worker_connections"]
    problems = []
    if wc < want["worker_connections"]:
        problems.append("worker_connections %d" % wc)
    if s["worker_rlimit_nofile"] != want["worker_rlimit_nofile"]:
        problems.append("worker_rlimit_nofile %s" % s["worker_rlimit_nofile"])
    budget = wc * want["udp_share"] // 200
    dns = dns_ports(want)
    stream_timeout = "%ds" % want["udp_stream_timeout"] if want.get("udp_stream_timeout") else "600"
    for port, u in sorted(s["udp"].items()):
        expected = ("1", "%ds" % want["udp_timeout"], budget) if str(port) in dns else (None, stream_timeout, budget)
        if (u["proxy_responses"], u["proxy_timeout"], u["limit_conn"]) != expected:
            problems.append("udp %s (%s): %s" % (port, "dns" if str(port) in dns else "stream", u))
    for port, t in sorted(s["tcp"].items()):
        if t["proxy_responses"] is not None or t["limit_conn"] is not None or t["proxy_timeout"] != "600":
            problems.append("tcp %s: %s" % (port, t))
    limits = nginx_conf.worker_open_file_limits(container)
    if limits != [want["worker_rlimit_nofile"]]:
        problems.append("workers' open-file limits %s" % limits)
    return problems


def dns_ports(want):
    """The UDP ports of the dns profile under want["udp_ports"] (53 unless named otherwise), as strings."""
    named = dict((str(k).strip(), v) for k, v in (want.get("udp_ports") or {}).items())
    return set(p for p, v in dict({"53": "dns"}, **named).items() if v == "dns")


def without_budget(template):
    """The collection's fix minus its UDP session budget."""
    return re.sub(r"(?m)^[ \t]*limit_conn(_log_level)? .*\n", "", template)


def seeds_fix(template):
    """Seed 000's own fix: proxy_responses 1 and 10 s on UDP, TCP keeps 600,
    worker_rlimit_nofile 16384 and 4096 connections (its values.yaml edit,
    here in the template so that k3d's values.yaml stays k3d's)."""
    timeout = 'proxy_timeout {{ getv "/settings/defaultProxyTimeout" "600" }};'
    assert template.count(timeout) == 1, "not k3d's stock template"
    indent = re.search(r"(?m)^([ \t]*)" + re.escape(timeout), template).group(1)
    block = ('{{- if (eq $protocol "udp") }}\n%sproxy_responses 1;\n%sproxy_timeout 10s;\n%s{{- else }}\n%s%s\n'
             '%s{{- end }}' % (indent, indent, indent, indent, timeout, indent))
    out = template.replace(timeout, block)
    out = out.replace("worker_processes auto;", "worker_processes auto;\nworker_rlimit_nofile 16384;")
    return out.replace('worker_connections {{ getv "/settings/workerConnections" }};', "worker_connections 4096;")
