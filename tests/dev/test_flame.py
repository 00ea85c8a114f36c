"""perf's samples folded and drawn (tests/support/flame.py): stacks root first, counts summed, unknown frames kept
apart by object, shares that add up, an SVG whose boxes are as wide as their samples."""
import os
import re
import sys
import xml.dom.minidom

from .conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import flame  # noqa: E402

SCRIPT = """nginx 
\tffffffff81a0 udp_sendmsg+0x1f ([kernel.kallsyms])
\tffffffff8100 do_syscall_64 ([kernel.kallsyms])
\t7f0012 ngx_stream_proxy_process (/usr/lib/nginx/modules/ngx_stream_module.so)
\t55aa01 ngx_epoll_process_events (/usr/sbin/nginx.debian)

nginx 
\tffffffff81a0 udp_sendmsg ([kernel.kallsyms])
\tffffffff8100 do_syscall_64 ([kernel.kallsyms])
\t7f0012 ngx_stream_proxy_process (/usr/lib/nginx/modules/ngx_stream_module.so)
\t55aa01 ngx_epoll_process_events (/usr/sbin/nginx.debian)

swapper 
\tffffffff8111 default_idle ([kernel.kallsyms])

nginx 
\t7f0099 [unknown] (/usr/lib/nginx/modules/ngx_stream_module.so)
\t55aa01 ngx_epoll_process_events (/usr/sbin/nginx.debian)
"""


def test_stacks_are_folded_root_first_and_counted():
    f = flame.fold(SCRIPT)
    assert f == {
        "nginx;ngx_epoll_process_events;ngx_stream_proxy_process;do_syscall_64;udp_sendmsg": 2,
        "swapper;default_idle": 1,
        "nginx;ngx_epoll_process_events;[unknown ngx_stream_module.so]": 1}


def test_shares_self_and_total():
    f = flame.fold(SCRIPT)
    assert flame.shares(f, "self") == [("udp_sendmsg", 50.0), ("[unknown ngx_stream_module.so]", 25.0),
                                       ("default_idle", 25.0)]
    total = dict(flame.shares(f, "total", 10))
    assert total["ngx_epoll_process_events"] == 75.0 and total["udp_sendmsg"] == 50.0
    assert sum(s for n, s in flame.shares(f, "self", 100)) == 100.0


def test_the_graph_is_svg_with_boxes_as_wide_as_their_samples():
    f = flame.fold(SCRIPT)
    doc = flame.svg(f, "a <test>", width=1000)
    xml.dom.minidom.parseString(doc)  # well formed, the title escaped
    spans = dict((m.group(1), float(m.group(2))) for m in re.finditer(
        r'<title>(\S+) \(\d+ samples[^<]*</title><rect x="[\d.]+" y="\d+" width="([\d.]+)"', doc))
    assert spans["all"] == 1000 and spans["nginx"] == 750 and spans["udp_sendmsg"] == 500
    assert "default_idle" in doc and "&lt;test&gt;" in doc


def test_idle_samples_are_set_apart():
    work, idle = flame.busy(flame.fold(SCRIPT + "swapper \n\tffffffff8112 pv_native_safe_halt ([kernel.kallsyms])\n"))
    assert idle == 2 and "swapper;default_idle" not in work  # the one in SCRIPT and the halt added
    assert all(not k.endswith("pv_native_safe_halt") for k in work) and sum(work.values()) == 3
