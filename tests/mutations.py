#!/usr/bin/env python
"""Plausible bugs that the tests must catch. Each mutation is applied to a
copy of this checkout and the fastest test that must catch it runs there:
the mutation is killed when that test fails. The tests also run once on the
unchanged copy and must pass there, so a test that always fails kills
nothing. Exit code 0 only when every mutation is killed.

  tests/mutations.py [NAME...]     (tests/run.sh mutations)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
UNIT = "tests/unit/plugins/module_utils/"
NPP = "tests/unit/plugins/modules/test_nginx_proxy_protocol.py::"

# name: (file, text, mutated text, the test that must catch it)
MUTATIONS = {
    "traefik health: a 404 from the user's entrypoint counted as a failed check": (
        "plugins/module_utils/traefik/inflight.py",
        """    return "%s 2>&1 | grep -q '^ *HTTP/'" % health_request(url)""",
        """    return "%s" % health_request(url)""",
        UNIT + "test_traefik_health.py::test_the_target_is_the_first_limited_entrypoint_with_tls_where_it_has_it"),
    "traefik health: the module's check written although the request through the entrypoint got no answer": (
        "plugins/module_utils/traefik/inflight.py",
        '    argv = through if through and (target.get("answered") or (ours and have == through)) else ping',
        '    argv = through if through else ping',
        UNIT + "test_traefik_health.py::test_without_an_answer_it_asks_ping_and_says_why"),
    "traefik health: a user's check that asks the internet is kept without a word": (
        "plugins/module_utils/traefik/inflight.py",
        "    if outside:\n",
        "    if outside and False:\n",
        UNIT + "test_traefik_health.py::test_a_users_health_check_is_reviewed"),
    "traefik health: the user's own health check replaced without their consent": (
        "plugins/module_utils/traefik/inflight.py",
        '    replace = bool(hc) and bool(have) and not ours and bool(opts.get("healthcheck_replace"))',
        '    replace = bool(hc) and bool(have) and not ours',
        UNIT + "test_traefik_health.py::test_a_users_check_is_kept_and_its_problems_said_or_replaced_with_consent"),
    "ufw revert: a native nft rule that restores as another is not found": (
        "plugins/module_utils/ufw/revert.py",
        "            if a != b:\n                out.append((chain, a, b))",
        "            if a != b and False:\n                out.append((chain, a, b))",
        UNIT + "test_ufw_revert.py::test_a_set_lookup_that_iptables_prints_as_drop_everything_is_found"),
    "ufw revert: a ban made through ufw inside the window is not put back": (
        "plugins/module_utils/ufw/revert.py",
        '  for f in user.rules user6.rules; do keep_bans %(ufw_root)s/$f "$dir/bans.$f"; done',
        "  :",
        UNIT + "test_ufw_revert.py::test_a_ban_made_through_ufw_inside_the_window_stays_in_the_file_and_live"),
    "ufw revert: every policy put back, whoever set it": (
        "plugins/module_utils/ufw/revert.py",
        "    [ \"$(grep \"^$k=\" \"$dir/ufw.policy\")\" = ",
        "    [ x = ",
        UNIT + "test_ufw_revert.py::test_a_policy_is_put_back_only_where_the_change_set_it"),
    "ufw revert: ufw's start reverts while the timer still runs": (
        "plugins/module_utils/ufw/revert.py",
        '    [ "$gone" = yes ] || continue',
        "    :",
        UNIT + "test_ufw_revert.py::test_ufws_start_inside_the_window_with_the_timer_alive_does_nothing"),
    "ladder: a step holds without its probes": (
        "tests/support/ladder.py",
        '    if not planned or ok < MIN_PROBES_OK * planned:',
        '    if not planned:',
        "tests/dev/test_ladder.py::test_a_step_holds_only_when_every_rule_does"),
    "ladder: an invalid generator counted as a failure (a limit where nothing was judged)": (
        "tests/support/ladder.py",
        '        return None, "generator invalid: %s" % step.get("invalid_because")',
        '        return False, "generator invalid: %s" % step.get("invalid_because")',
        "tests/dev/test_ladder.py::test_an_invalid_generator_is_no_verdict_and_ends_the_ladder"),
    "k3d live budget: any budget accepted": (
        "plugins/module_utils/k3d_serverlb/config.py",
        'if s["limit_conn"] != budget:',
        'if s["limit_conn"] is None:',
        UNIT + "test_k3d_serverlb.py::test_a_live_budget_other_than_the_computed_one_is_a_shortfall"),
    "k3d render confd accepts but nginx never runs: not rolled back": (
        "plugins/module_utils/k3d_serverlb/fix.py",
        "        k3d_container.render(container, render_timeout)\n"
        "        return settled()\n"
        "    except k3d_container.ApplyError as e:\n"
        "        undone = _roll_back(container, template, new_template, render_timeout)\n"
        '        raise k3d_container.ApplyError("%s; %s" % (e, undone))\n',
        "        k3d_container.render(container, render_timeout)\n"
        "    except k3d_container.ApplyError as e:\n"
        "        undone = _roll_back(container, template, new_template, render_timeout)\n"
        '        raise k3d_container.ApplyError("%s; %s" % (e, undone))\n'
        "    return settled()\n",
        UNIT + "test_k3d_serverlb.py::test_apply_rolls_back_a_render_confd_accepts_but_nginx_never_runs"),
    "k3d budget on only some UDP servers reported as budgeted": (
        "plugins/module_utils/k3d_serverlb/config.py",
        '"udp_session_budget": min(budgets) if len(budgets) == len(udp) and budgets else None,',
        '"udp_session_budget": min(budgets) if budgets else None,',
        UNIT + "test_k3d_serverlb.py::test_a_load_balancer_with_a_budget_on_only_some_udp_servers_is_not_budgeted"),
    "nginx_proxy_protocol keeps a change whose post-reload probe failed": (
        "plugins/modules/nginx_proxy_protocol.py",
        '            if failed:\n                raise Failed("after the reload, connections through nginx fail',
        '            if failed and False:\n                raise Failed("after the reload, connections through nginx fail',
        NPP + "test_every_failure_after_the_write_puts_the_files_back_byte_for_byte"),
    "nginx_proxy_protocol replaces a symlink with a file (writes at the link's path)": (
        "plugins/modules/nginx_proxy_protocol.py",
        "        real = os.path.realpath(path)\n",
        "        real = path\n",
        NPP + "test_a_link_stays_a_link_its_target_is_edited_and_backups_stay_out_of_nginxs_directories"),
    "nginx_proxy_protocol keeps its backup beside the config, where an include loads it": (
        "plugins/modules/nginx_proxy_protocol.py",
        '    path = os.path.join(STATE_DIR, real.lstrip("/")) + ".%s~" % stamp',
        '    path = real + ".%s~" % stamp',
        NPP + "test_a_link_stays_a_link_its_target_is_edited_and_backups_stay_out_of_nginxs_directories"),
    "nginx_proxy_protocol does not run nginx -t on the files it put back": (
        "plugins/modules/nginx_proxy_protocol.py",
        "    failed = restore(files)\n    ok, test = nginx_test(module)\n",
        "    failed = restore(files)\n    ok, test = True, \"\"\n",
        NPP + "test_nginx_t_failing_on_the_files_put_back_is_said_loudly"),
    "nginx_proxy_protocol leaves a cut-off run's half-written files as they are": (
        "plugins/modules/nginx_proxy_protocol.py",
        '    put_back = [f for f in files if read_bytes(f["real"]) == f["new"]]',
        "    put_back = []",
        NPP + "test_a_run_cut_off_between_two_writes_is_rolled_back_by_the_next_one_which_says_so"),
    "nginx stream plan: a UDP server gets PROXY protocol": (
        "plugins/module_utils/nginx_stream_plan.py",
        "    elif server.udp and relevant:\n",
        "    elif server.udp and relevant and False:\n",
        UNIT + "test_nginx_stream.py::test_udp_servers_never_get_it_and_say_so_naming_the_port"),
    "nginx stream plan: an upstream's backup and down servers do not count": (
        "plugins/module_utils/nginx_stream_plan.py",
        "        self.unlisted = [t for t in self.targets if normal(t.address) not in listed]",
        "        self.unlisted = [t for t in self.targets if normal(t.address) not in listed and not t.params]",
        UNIT + "test_nginx_stream.py::test_an_upstream_with_an_unlisted_backup_or_down_server_is_refused_naming_it"),
    "nginx stream plan: a value known only per connection counted as listed": (
        "plugins/module_utils/nginx_stream_plan.py",
        "    elif server.values.unknown:\n        outcome = REFUSED\n",
        "    elif False:\n        outcome = REFUSED\n",
        UNIT + "test_nginx_stream.py::test_a_variable_known_only_per_connection_among_listed_values_is_refused_naming_it"),
    "nginx stream dump: an included file's servers not placed where the include stands": (
        "plugins/module_utils/nginx_stream_dump.py",
        "    for d in block:\n        if d.included is not None:\n            for path, inner in d.included:\n"
        "                yield from children(inner)\n",
        "    for d in block:\n        if d.included is not None and False:\n            for path, inner in d.included:\n"
        "                yield from children(inner)\n",
        UNIT + "test_nginx_stream.py::test_a_one_line_stream_include_puts_its_files_inside_stream_in_glob_order"),
    "nginx stream plan: every listener checked at 127.0.0.1": (
        "plugins/module_utils/nginx_stream_plan.py",
        '    host = {"*": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)',
        '    host = "127.0.0.1"',
        UNIT + "test_nginx_stream.py::test_a_listener_is_checked_at_its_own_address"),
    "nginx stream probe: no PROXY header to a listener that expects one": (
        "plugins/module_utils/nginx_stream_probe.py",
        '    header = header_for(check["host"], check["port"]) if check["proxy_protocol"] else None',
        "    header = None",
        UNIT + "test_nginx_stream_probe.py::test_a_listener_with_proxy_protocol_gets_a_made_up_clients_header"),
    "YAML editor: an alias shares the change meant for its anchor": (
        "plugins/module_utils/traefik/text_edit.py",
        "    out = unshared(doc) if doc else {}",
        "    out = copy.deepcopy(doc) if doc else {}",
        UNIT + "test_yaml_text.py::test_every_yaml_style_is_changed_correctly_or_refused_clearly"),
    "YAML editor: a list at its key's indent ends at the key": (
        "plugins/module_utils/traefik/yaml_text.py",
        "                if not (same_indent_list and _indent(line) == indent and _is_item(line)):",
        "                if True:",
        UNIT + "test_yaml_text.py::test_a_list_at_the_indent_of_its_key_gets_the_item_at_that_indent"),
    "TOML editor: a dotted-key table reopened with a header": (
        "plugins/module_utils/traefik/toml_text.py",
        "                    return False  # defined by dotted keys",
        "                    pass",
        UNIT + "test_toml_text.py::test_every_toml_style_is_changed_correctly_or_refused_clearly"),
    "Traefik bound: counts routers that do not run the middleware": (
        "plugins/module_utils/traefik/inflight.py",
        "                     and middleware_ref in (r.get(\"middlewares\") or [])",
        "                     and True",
        UNIT + "test_traefik_inflight.py::test_the_per_client_bound_is_amount_times_the_limited_routers"),
    "socket proxy opens start, update and pause": (
        "roles/autoheal/templates/socket-proxy.cfg.j2",
        "/containers/[a-zA-Z0-9_.-]+/restart$",
        "/containers/[a-zA-Z0-9_.-]+/(restart|start|update|pause)$",
        "tests/unit/test_socket_proxy_policy.py"),
    "ufw_connlimit counts an iptables connlimit rule without tcp-reset": (
        "plugins/module_utils/ufw/connlimit.py",
        'if not (port and above and "tcp-reset" in line):',
        "if not (port and above):",
        UNIT + "test_ufw_connlimit.py::test_a_connlimit_rule_that_does_not_reset_is_not_ours"),
    "ufw_connlimit read-back takes a limit of any mask (a global --connlimit-mask 0 reads as per address)": (
        "plugins/module_utils/ufw/connlimit.py",
        'if not has or int(has.group(1)) != mask or "--connlimit-daddr" in line:',
        "if False:",
        UNIT + "test_ufw_connlimit.py::test_the_read_back_counts_only_a_per_address_limit"),
    "revert restores the filter table whole (no --noflush: fail2ban's bans, DOCKER-USER lost)": (
        "plugins/module_utils/ufw/revert.py",
        '"$t-restore" -w --noflush <"$dir/$t.scoped"',
        '"$t-restore" -w <"$dir/$t.scoped"',
        "tests/lab/test_revert_scoped.py::test_the_revert_puts_back_ufws_part_and_leaves_everyone_elses"),
    "a confirmation over a reused connection passes (the login's start not compared with the arm)": (
        "plugins/module_utils/ufw/revert.py",
        'if same_boot and login["started"] <= armed_start:',
        "if False:",
        UNIT + "test_ufw_revert.py::test_a_new_login_from_outside_and_nothing_else_proves_the_way_in"),
    "a confirmation from loopback passes (a tunnel, sslh)": (
        "plugins/module_utils/ufw/revert.py",
        'if ufw_access.is_loopback(login["peer"]) or login["peer"] == login.get("local"):',
        "if False:",
        UNIT + "test_ufw_revert.py::test_a_new_login_from_outside_and_nothing_else_proves_the_way_in"),
    "the demo counts a boolean as a count (alerts = False reads as 0)": (
        "demo/proof.py",
        "    return isinstance(m, int) and not isinstance(m, bool)",
        "    return isinstance(m, int)",
        "tests/dev/test_demo_proof.py::test_crafted_broken_runs_are_not_proved"),
    "the demo takes a DNS load that fell short of its plan": (
        "demo/proof.py",
        '    return (valid and m["sent"] == m["planned"] and m["answered"] <= m["sent"]',
        '    return (m["answered"] <= m["sent"]',
        "tests/dev/test_demo_proof.py::test_crafted_broken_runs_are_not_proved"),
    "the demo takes however few probes as clean": (
        "demo/proof.py",
        '            and m["ok"] >= PROBE_TARGETS * load_seconds(dns) / PROBE_INTERVAL_S / 2)',
        "            )",
        "tests/dev/test_demo_proof.py::test_crafted_broken_runs_are_not_proved"),
    "the demo compares no before/after pair": (
        "demo/proof.py",
        'and r["pair_ok"] is not False\n',
        "\n",
        "tests/dev/test_demo_proof.py::test_crafted_broken_runs_are_not_proved"),
    "the generator's validity ignores send errors": (
        "tests/support/dnsgen.py",
        "    if send_errors:\n",
        "    if False:\n",
        "tests/dev/test_dnsgen.py::test_validity"),
    "the generator's validity ignores a stall and its burst": (
        "tests/support/dnsgen.py",
        "    if lateness_p99_s > MAX_P99_LATENESS_S:",
        "    if False:",
        "tests/dev/test_dnsgen.py::test_validity"),
    "k3d capacity: capped only below worker_connections (a hard limit of 4,096 to 16,383 taken as room)": (
        "plugins/module_utils/k3d_serverlb/capacity.py",
        'hard_limit >= want["worker_rlimit_nofile"]',
        'hard_limit >= want["worker_connections"]',
        UNIT + "test_k3d_serverlb.py::test_capped_want_fits_under_the_hard_limit"),
    "k3d plan: one worker at the fix's limit hides another still at 1024": (
        "plugins/module_utils/k3d_serverlb/fix.py",
        'state["worker_limits"] != [want["worker_rlimit_nofile"]]',
        'want["worker_rlimit_nofile"] not in state["worker_limits"]',
        UNIT + "test_k3d_serverlb.py::test_a_worker_still_at_another_open_file_limit_is_a_reason"),
    "k3d report: the shortest UDP timeout taken (the slowest server hidden)": (
        "plugins/module_utils/k3d_serverlb/config.py",
        "udp_timeout = max(timeouts) if timeouts else None",
        "udp_timeout = min(timeouts) if timeouts else None",
        UNIT + "test_k3d_serverlb.py::test_report_takes_the_longest_udp_timeout"),
    "k3d: the created container's soft open-file limit read as its cap": (
        "plugins/module_utils/k3d_serverlb/container.py",
        'if u.get("Name") == "nofile" and u.get("Hard"):\n            return int(u["Hard"])',
        'if u.get("Name") == "nofile" and u.get("Soft"):\n            return int(u["Soft"])',
        UNIT + "test_k3d_serverlb.py::test_the_created_hard_limit_is_the_hard_one"),
    "k3d signals: an unfixed load balancer under a cap called fixed with a cap": (
        "plugins/module_utils/k3d_serverlb/signals.py",
        'code = "not_fixed" if reasons else "capped" if cap else "fixed"',
        'code = "capped" if cap else "not_fixed" if reasons else "fixed"',
        UNIT + "test_k3d_serverlb.py::test_a_capped_load_balancer_is_fixed_with_a_cap_only_once_it_has_the_fix"),
    "ufw_access: a rule for one of the host's addresses counts as open to all": (
        "plugins/module_utils/ufw/access.py",
        'if r["dst"] not in ("any", "0.0.0.0/0", "::/0"):',
        "if False:",
        UNIT + "test_ufw_access.py::test_allows_first_match_wins"),
    "k3d template: every UDP port gets proxy_responses 1 (a tunnel's datagrams after the first reply dropped)": (
        "plugins/module_utils/k3d_serverlb/template.py",
        '            "{{- else }}", stream_timeout, "{{- end }}"]',
        '            "{{- else }}"] + dns_lines + ["{{- end }}"]',
        UNIT + "test_k3d_serverlb_profiles.py::"
        "test_dns_ports_end_at_the_first_reply_and_stream_ports_keep_every_datagram_both_in_the_budget"),
    "k3d live check: a stream port that ends its sessions at the first reply counted as fixed": (
        "plugins/module_utils/k3d_serverlb/config.py",
        '            if s["proxy_responses"] is not None:',
        "            if False:",
        UNIT + "test_k3d_serverlb_profiles.py::test_a_stream_port_that_ends_its_sessions_at_the_first_reply_is_a_shortfall"),
    "k3d: an undeclared UDP port taken as dns (a tunnel nobody named cut)": (
        "plugins/module_utils/k3d_serverlb/profiles.py",
        'UNDECLARED = STREAM',
        'UNDECLARED = DNS',
        UNIT + "test_k3d_serverlb_profiles.py::test_an_undeclared_port_is_stream_with_a_warning_naming_it_and_how_to_declare_it"),
    "k3d template: UDP sessions end at the second reply (DNS's one reply never ends them)": (
        "plugins/module_utils/k3d_serverlb/template.py",
        '    dns_lines = ["proxy_responses 1;",',
        '    dns_lines = ["proxy_responses 2;",',
        UNIT + "test_k3d_serverlb.py::test_patch_adds_floor_udp_policy_rlimit_and_zone"),
    "autoheal: a health check of `true` taken as one that can fail": (
        "plugins/module_utils/autoheal.py",
        '        return test[1:] in (["true"], ["/bin/true"], ["/usr/bin/true"])',
        "        return False",
        UNIT + "test_autoheal.py::test_health_checks_that_cannot_fail"),
    "autoheal: a container without the label taken as watched": (
        "plugins/module_utils/autoheal.py",
        '(config.get("Labels") or {}).get(label) != "true"',
        '(config.get("Labels") or {}).get(label) == "false"',
        UNIT + "test_autoheal.py::test_problems"),
    "tcp_drain: a key it changed twice put back to its second value before": (
        "plugins/module_utils/tcp_drain/sysctl.py",
        'if entry["status"] == "changed" and key not in out and entry["before"] is not None:',
        'if entry["status"] == "changed" and entry["before"] is not None:',
        UNIT + "test_tcp_drain.py::test_only_the_keys_the_module_changed_are_put_back_and_the_first_value_before_wins"),
    "keeper metrics: a new server's count goes out above 0 (its first increase invisible)": (
        "plugins/module_utils/k3d_serverlb/metrics.py",
        "            totals[key] = 0\n            held[key] = held.get(key, 0) + counts.get(server, 0)",
        "            totals[key] = counts.get(server, 0)",
        UNIT + "test_k3d_serverlb_metrics.py::test_the_not_enough_count_only_grows_and_a_new_key_goes_out_at_0_first"),
    "revert fires without the change modules' lock": (
        "plugins/module_utils/ufw/revert.py",
        "if command -v flock >/dev/null 2>&1; then",
        "if false; then",
        "tests/lab/test_revert_scoped.py::test_a_revert_that_fires_during_a_change_waits_for_it_then_puts_it_back"),
    "ufw_connlimit counts an nft connlimit rule without a reset": (
        "plugins/module_utils/ufw/connlimit.py",
        '    r"tcp dport (?P<port>\\d+)\\b.*?xt match \\"?connlimit\\"?.*?reject with tcp reset"\n'
        '    r"|tcp dport (?P<port2>\\d+)\\b.*?ct count over (?P<count>\\d+).*?reject with tcp reset")',
        '    r"tcp dport (?P<port>\\d+)\\b.*?xt match \\"?connlimit\\"?"\n'
        '    r"|tcp dport (?P<port2>\\d+)\\b.*?ct count over (?P<count>\\d+)")',
        UNIT + "test_ufw_connlimit.py::test_a_connlimit_rule_that_does_not_reset_is_not_ours"),
    "keeper stays alive after an engine restart but never reconnects": (
        "roles/k3d_serverlb/files/k3d-serverlb-keeper.py",
        '                log("docker: %s: %s; reconnecting in 5 s" % (type(e).__name__, e))\n'
        "                time.sleep(5)\n",
        '                log("docker: %s: %s; reconnecting in 5 s" % (type(e).__name__, e))\n'
        "                while True:\n"
        "                    time.sleep(5)\n",
        "tests/unit/test_k3d_serverlb_keeper.py"),
    "demo proof: HTTPS+API probes count as clean with failures": (
        "demo/proof.py",
        '    return (probes_possible(m, dns) and m["failed"] == 0',
        '    return (probes_possible(m, dns)',
        "tests/dev/test_demo_proof.py"),
    "demo proof: the drain row is not checked after": (
        "demo/proof.py",
        'lambda m, r: m != DRAIN_WANT, lambda m, r: all(_int(v) for v in m.values()) and m == DRAIN_WANT),',
        'lambda m, r: m != DRAIN_WANT, lambda m, r: True),',
        "tests/dev/test_demo_proof.py"),
    "undo puts back the original over a file changed since": (
        "plugins/module_utils/undo_record.py",
        'if now != f["written"] or f.get("diverged"):',
        'if False:',
        UNIT + "test_undo_record.py::test_a_file_changed_since_the_module_wrote_it_is_not_put_back"),
    "diagnose drain: held to the kernel's defaults, not to what tcp_drain sets": (
        "plugins/module_utils/diagnose.py",
        "    want = want or DRAIN_WANT\n",
        "    want = dict(tcp_drain_sysctl.KERNEL_DEFAULTS)\n",
        UNIT + "test_diagnose.py::test_drain_values_are_held_to_what_tcp_drain_sets"),
    "Traefik static config: yml before toml (not Traefik's order)": (
        "plugins/module_utils/traefik/inflight.py",
        'STATIC_EXTENSIONS = ("toml", "yaml", "yml")',
        'STATIC_EXTENSIONS = ("yml", "yaml", "toml")',
        UNIT + "test_traefik_inflight.py::test_the_static_config_traefik_reads"),
    "Traefik static config: the working directory left out of the search": (
        "plugins/module_utils/traefik/inflight.py",
        'STATIC_BASES = ("/etc/traefik/traefik", "$XDG_CONFIG_HOME/traefik", "$HOME/.config/traefik", "./traefik")',
        'STATIC_BASES = ("/etc/traefik/traefik",)',
        UNIT + "test_traefik_inflight.py::test_the_static_config_traefik_reads"),
    "Traefik version gate: every option taken whatever the version": (
        "plugins/module_utils/traefik/inflight.py",
        '    return version_tuple(version) >= MIN_VERSIONS[key][0]',
        '    return True',
        UNIT + "test_traefik_inflight.py::test_settings_newer_than_the_users_traefik_are_left_out_with_a_warning"),
    "Traefik ping: its default entrypoint's clash with a user's :8080 not seen": (
        "plugins/module_utils/traefik/inflight.py",
        '        clash = sorted(e for e, a in users.items() if port_of(a) == port_of(IMPLICIT_ADDRESS))',
        '        clash = []',
        UNIT + "test_traefik_inflight.py::test_ping_beside_a_user_entrypoint_on_8080_goes_on_the_roles_api_entrypoint"),
    "keeper: Docker 29's events read by the old id field only": (
        "plugins/module_utils/k3d_serverlb/container.py",
        '    return (actor.get("ID") or event.get("id") or None)',
        '    return (event.get("id") or None)',
        "tests/unit/test_k3d_serverlb_keeper.py::test_the_keeper_reacts_to_either_event_shape"),
    "lab: a binary's version matched through a pipe into grep -q (fails when grep exits first)": (
        "lab/lab.sh",
        '  if [ "$rc" -eq 0 ] && grep -q -E "$pattern" <<<"$got"; then return 0; fi',
        '  if version_output "$1" "$2" | grep -q -E "$pattern"; then return 0; fi',
        "tests/lab/test_lab_versions.py::test_a_binary_that_reports_its_pin_is_taken_whatever_it_writes_after"),
    "prove: unanswered DNS queries still prove the load balancer": (
        "plugins/module_utils/prove/checks.py",
        '    if measured["answered"] < measured["sent"]:',
        '    if measured["answered"] < measured["sent"] // 2:',
        UNIT + "test_prove.py::test_k3d_verdict_fails_on_each_broken_measure"),
    "prove: a load balancer that is not fixed gets the DNS load": (
        "plugins/module_utils/prove/checks.py",
        '    if entry.get("state") == "not_fixed":',
        '    if entry.get("state") == "removed":',
        UNIT + "test_prove.py::test_k3d_refusal"),
    "prove: no reset over the limit still proves the connlimit": (
        "plugins/module_utils/prove/checks.py",
        '                                            plan["limit"]))\n    if reset < plan["extra"]:',
        '                                            plan["limit"]))\n    if reset < 0:',
        UNIT + "test_prove.py::test_connlimit_verdict"),
    "prove: a lower limit stacked under ours still proves the connlimit (no lower bound)": (
        "plugins/module_utils/prove/checks.py",
        '    elif est < plan.get("at_least", connlimit_floor(plan["limit"])):',
        '    elif est < 0:',
        UNIT + "test_prove.py::test_connlimit_verdict"),
    "ufw_connlimit takes over a user's limit of any shape (no refusal)": (
        "plugins/module_utils/ufw/connlimit.py",
        '    return bool(m and m.group("chain") == FAMILIES[family]["chain"]',
        '    return bool(True or m and m.group("chain") == FAMILIES[family]["chain"]',
        UNIT + "test_ufw_connlimit.py::test_only_the_seeds_shape_is_replaced"),
    "ufw_connlimit's read-back counts every live limit as its own (a stacked one passes)": (
        "plugins/module_utils/ufw/connlimit.py",
        '                      "ours": limit["ours"] or limit["chain"] == DOCKER_CHAIN})',
        '                      "ours": True})',
        UNIT + "test_ufw_connlimit.py::test_every_live_limit_is_kept_and_the_smallest_is_the_effective_one"),
    "ufw_connlimit stacks its block under the seed's lines (they are not moved)": (
        "plugins/module_utils/ufw/connlimit.py",
        '    rest, removed = replace_seed_lines(text, found)',
        '    rest, removed = text, []',
        UNIT + "test_ufw_connlimit.py::test_the_seeds_lines_are_replaced_kept_in_the_block_and_put_back"),
    "prove: no 429 still proves the in-flight limit": (
        "plugins/module_utils/prove/checks.py",
        '    if limited < plan["extra"]:',
        '    if limited < 0:',
        UNIT + "test_prove.py::test_inflight_verdict"),
    "prove: skipped checks alone make a good run": (
        "plugins/module_utils/prove/checks.py",
        '"ok": not counts[FAILED] and not counts[REFUSED] and (counts[PROVED] + counts[PLANNED]) > 0}',
        '"ok": not counts[FAILED] and not counts[REFUSED]}',
        UNIT + "test_prove.py::test_table_and_summary"),

    "ufw_access: port forwards through the host not looked at": (
        "plugins/module_utils/ufw/access.py",
        '    if enabled or forward_policy == "ACCEPT":\n        return []\n',
        '    return []\n',
        UNIT + "test_ufw_access.py::test_enabling_ufw_cuts_the_forwards_no_route_rule_allows"),
    "tcp_drain boot: sysctl.d files read directory by directory, not by name across them": (
        "plugins/module_utils/tcp_drain/boot.py",
        '    return [chosen[name] for name in sorted(chosen) if chosen[name].get("text")]',
        '    return [chosen[n] for n in sorted(chosen, key=lambda n: (rank[os.path.dirname(chosen[n]["path"])], n))\n'
        '            if chosen[n].get("text")]',
        UNIT + "test_tcp_drain_boot.py::test_files_are_read_sorted_by_name_across_directories"),
    "tcp_drain boot: the first assignment of a key wins, so /etc/sysctl.conf's later line is no conflict": (
        "plugins/module_utils/tcp_drain/boot.py",
        "                order.remove(path)\n",
        "                continue\n",
        UNIT + "test_tcp_drain_boot.py::test_what_boot_applies"),
    # issue 51: behaviours no test covered (each survived the whole unit suite)
    "ufw revert: a login that started in the arm's own second counts as new": (
        "plugins/module_utils/ufw/revert.py",
        '    if same_boot and login["started"] <= armed_start:',
        '    if same_boot and login["started"] < armed_start:',
        UNIT + "test_ufw_revert.py::test_a_login_that_started_in_the_same_second_as_the_arm_is_not_new"),
    "ufw revert: ufw reloads after a good scoped restore, not after a failed one (fallback inverted)": (
        "plugins/module_utils/ufw/revert.py",
        'if [ "$rc" != 0 ] && [ %(enabled)s = yes ]; then',
        'if [ "$rc" = 0 ] && [ %(enabled)s = yes ]; then',
        UNIT + "test_ufw_revert.py::test_ufw_reloads_from_the_files_only_where_the_scoped_restore_failed"),
    "ufw_connlimit: a managed block outside *filter/COMMIT accepted": (
        "plugins/module_utils/ufw/connlimit.py",
        "        if not start < b < e < commit:\n",
        "        if False:\n",
        UNIT + "test_ufw_connlimit.py::test_a_managed_block_outside_the_filter_section_is_refused"),
    "ufw_connlimit: the Docker nft table hooked after Docker's (priority filter + 1)": (
        "plugins/module_utils/ufw/connlimit.py",
        "type filter hook forward priority filter - 1; policy accept;",
        "type filter hook forward priority filter + 1; policy accept;",
        UNIT + "test_ufw_connlimit.py::test_the_docker_nft_table_is_hooked_before_dockers_own"),
    "k3d: the largest of the masters' hard open-file limits taken, not the smallest": (
        "plugins/module_utils/k3d_serverlb/container.py",
        '"hard_limit": min(hard) if hard else None}',
        '"hard_limit": max(hard) if hard else None}',
        UNIT + "test_limits_at_their_edges.py::test_the_hard_open_file_limit_is_the_smallest_a_master_has"),
    "traefik_inflight: the user's maxConcurrentStreams overwritten without a word": (
        "plugins/module_utils/traefik/inflight.py",
        "    if str(have) == str(int(streams)):\n        return None\n    if opts.get(\"override_user_values\"):",
        "    if str(have) == str(int(streams)):\n        return None\n    if True:",
        UNIT + "test_traefik_guides.py::test_real_configs_keep_the_users_values_and_say_so"),
    "traefik_inflight: ping of a host-network Traefik on Traefik's default (the host's 8080)": (
        "plugins/module_utils/traefik/inflight.py",
        "    if adds_ping and host:\n",
        "    if adds_ping and host and False:\n",
        UNIT + "test_traefik_inflight.py::test_on_the_hosts_network_ping_gets_a_free_loopback_port_never_8080"),
    "traefik_inflight: net.* sysctls written into a host-network compose service": (
        "plugins/module_utils/traefik/inflight.py",
        '    if facts.get("network_mode") == "host" and refused:',
        '    if facts.get("network_mode") == "host" and refused and False:',
        UNIT + "test_traefik_inflight.py::test_no_net_sysctls_in_the_hosts_namespace"),
    "traefik_inflight: the limit put on an entrypoint that serves only TCP routers": (
        "plugins/module_utils/traefik/inflight.py",
        '        if tcp and not http and (routing or {}).get("complete", True):',
        '        if tcp and not http and (routing or {}).get("complete", True) and False:',
        UNIT + "test_traefik_guides.py::test_real_configs_keep_the_users_values_and_say_so"),
    "toml: a new table between a table and its commented-out options": (
        "plugins/module_utils/traefik/toml_text.py",
        "                best, at = common, self._table_end(s)",
        "                best, at = common, self._section_tail(s)",
        UNIT + "test_toml_text.py::test_a_new_table_goes_after_the_whole_table_before_it"),
    "traefik_inflight: an in-flight share of exactly 90 % not called blind": (
        "plugins/module_utils/traefik/inflight.py",
        "share >= BLIND_SHARE",
        "share > BLIND_SHARE",
        UNIT + "test_limits_at_their_edges.py::test_an_in_flight_share_of_exactly_the_blind_share_is_blind"),
    "demo check: answered + failed need not add up to sent": (
        "demo/proof.py",
        '            and m["answered"] + m["failed"] == m["sent"] and m["send_errors"] <= m["failed"]',
        '            and m["send_errors"] <= m["failed"]',
        "tests/dev/test_demo_proof.py::test_inputs_that_contradict_themselves_are_not_proved"),
    "demo check: more probes than the prober can make": (
        "demo/proof.py",
        "(math.floor(dns[\"seconds\"] / PROBE_INTERVAL_S) + 2))",
        "(math.floor(dns[\"seconds\"] / PROBE_INTERVAL_S) + 2) * 100)",
        "tests/dev/test_demo_proof.py::test_inputs_that_contradict_themselves_are_not_proved"),
    "demo check: a hung-DNS row's rate not held to its load": (
        "demo/proof.py",
        '    return (hung_load_ok(m["dns"]) and m.get("rate") == m["dns"].get("rate")\n'
        '            and rate_fits(m.get("rate"), m["dns"]))',
        '    return hung_load_ok(m["dns"])',
        "tests/dev/test_demo_proof.py::test_inputs_whose_figures_contradict_each_other_are_not_proved"),
    "demo check: worker_connections beyond the open-file limit taken as held": (
        "demo/proof.py",
        "            and not k3d_capacity.beyond_open_files(m, min(files)))",
        "            )",
        "tests/dev/test_demo_proof.py::test_inputs_whose_figures_contradict_each_other_are_not_proved"),
    "demo check: a record of another checkout proved": (
        "demo/proof.py",
        '    if recorded["commit"] != here["commit"]:',
        '    if False:',
        "tests/dev/test_demo_proof.py::test_a_record_that_is_not_this_runs_is_not_proved"),
    "image-bound check: what a test's helpers and fixtures use not followed": (
        "tests/support/image_bound.py",
        "        for mod, name, shown in refs:\n",
        "        for mod, name, shown in refs[:0]:\n",
        "tests/dev/test_image_bound_marks.py::test_a_crafted_test_is_flagged_unmarked_and_passes_marked"),
    "image-bound check: a helper that adapts covers what its caller uses elsewhere": (
        "tests/support/image_bound.py",
        "            for u in sub.uses:\n",
        "            found.asks = found.asks or sub.asks\n            for u in sub.uses:\n",
        "tests/dev/test_image_bound_marks.py::test_a_crafted_test_is_flagged_unmarked_and_passes_marked"),
    "plain path: a skip reason that does not name the image passes": (
        "tests/support/image_bound.py",
        "            elif not all(i in reason for i in images):\n",
        "            elif False:\n",
        "tests/dev/test_image_bound_marks.py::test_plain_path_fails_a_skip_for_an_image_that_is_not_the_mark"),
    "upstream images: a skip reason without the image's name": (
        "lab/upstream_images.py",
        '    lines = [gone[n] if image(n) in gone[n] else "%s: %s" % (image(n), gone[n]) for n in NEEDED_BY[tag] if n in gone]',
        "    lines = [gone[n] for n in NEEDED_BY[tag] if n in gone]",
        "tests/dev/test_upstream_images.py::test_the_reason_names_each_missing_image_whatever_setups_line_says"),
    "generator: a NaN or negative figure passes the Python generator's rules": (
        "tests/support/dnsgen.py",
        "    if bad or not planned or not seconds:\n",
        "    if False:\n",
        "tests/dev/test_dnsgen.py::test_each_figure_and_rule_of_a_python_run"),
    "generator: a pool dried by the target's unanswered queries thrown away as generator-invalid": (
        "tests/support/dnsgen.py",
        '    if out["send_errors"] and not system_failure:',
        '    if out["send_errors"]:',
        "tests/dev/test_dnsgen_compiled.py::test_a_pool_dried_by_the_targets_unanswered_queries_is_the_systems_failure"),
    "ladder: a CPU run out by two components together reads neither": (
        "tests/support/ladder.py",
        "        if len(on) > 1 and sum(used[c] for c in on)",
        "        if len(on) > 99 and sum(used[c] for c in on)",
        "tests/dev/test_ladder.py::test_a_cpu_run_out_by_two_components_together_is_named"),
    "ladder: the median of an even count takes the higher of the middle two (the favourable)": (
        "tests/support/ladder.py",
        "    med = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2.0",
        "    med = xs[mid]",
        "tests/dev/test_ladder.py::test_spread_takes_the_middle_not_the_favourable"),
    "ladder: a throttled (saturated) step taken as a service-demand point": (
        "tests/support/ladder.py",
        "        throttled < UNSATURATED_THROTTLED * periods",
        "        throttled <= periods",
        "tests/dev/test_ladder.py::test_only_a_step_held_below_saturation_is_a_demand_point"),
    "ladder: a capacity from demand keeps the work that does not grow with the queries": (
        "tests/support/ladder.py",
        "    cap = max(0.0, cores - (fixed_cores if _figure(fixed_cores) else 0.0)) / per_query_s",
        "    cap = cores / per_query_s",
        "tests/dev/test_ladder.py::test_a_computed_capacity_agrees_only_near_the_ladder"),
    "generator: an answer read after its query's timeout counted as in time": (
        "tests/support/loadgen_go/cmd/dnsgen/run.go",
        "	if t > r.sendAt[q]+int64(r.cfg.Timeout*1e9) {",
        "	if false {",
        "tests/dev/test_loadgen.py::test_the_go_module_vets_and_its_unit_tests_pass"),
    "ladder: a CPU-per-query step counted while something else used the load balancer's CPU": (
        "tests/support/ladder.py",
        '    if _figure(step.get("disturbance_share")) and step["disturbance_share"] > MAX_DISTURBANCE:',
        "    if False:",
        "tests/dev/test_ladder.py::test_a_cpu_step_counts_only_when_the_generator_and_the_cpu_were_its_own"),
    "ladder: the difference between configurations not paired by repetition": (
        "tests/support/ladder.py",
        "    reps = sorted(r for r in a if r in b and _figure(a[r]) and _figure(b[r]) and b[r] > 0)",
        "    reps = sorted(r for r in a if r in b and _figure(a[r]) and _figure(b[r]) and b[r] > 0)\n"
        "    b = dict(zip(reps, reversed([b[r] for r in reps])))",
        "tests/dev/test_ladder.py::test_a_paired_difference_takes_out_what_drifts_between_repetitions"),
    "generator: a late reply on a reused source port counted as the new query's answer": (
        "tests/support/loadgen_go/cmd/dnsgen/run.go",
        "	if q < 0 || !ok || id != r.ids[k] {",
        "	if q < 0 || !ok {",
        "tests/dev/test_loadgen.py::test_the_go_module_vets_and_its_unit_tests_pass"),
    "tcp_drain undo: the counters timer stopped wherever, a failure let pass on its message's words (issue 62)": (
        "roles/tcp_drain/tasks/main.yml",
        "      when: ansible_facts['service_mgr'] == 'systemd' and tcp_drain_timer_unit.stat.exists\n"
        "      ansible.builtin.systemd_service:\n        name: homelab-edge-netns-sockets.timer\n        state: stopped",
        "      register: tcp_drain_timer_stop\n"
        "      failed_when: >-\n        tcp_drain_timer_stop.failed\n"
        "        and 'could not find' not in (tcp_drain_timer_stop.msg | default('') | lower)\n"
        "        and 'systemd' not in (tcp_drain_timer_stop.msg | default('') | lower)\n"
        "      ansible.builtin.systemd_service:\n        name: homelab-edge-netns-sockets.timer\n        state: stopped",
        "tests/unit/test_role_conditions.py"),
    "records: the last record forgotten leaves its directory behind (issue 62)": (
        "plugins/module_utils/host.py",
        "    if record is None:\n        forget_dirs(os.path.dirname(path))\n",
        "",
        UNIT + "test_host.py::test_the_last_record_forgotten_takes_its_empty_directories_up_to_homelab_edge"),
    "ufw_connlimit: the user's after.init made executable where nothing calls the hook (issue 62)": (
        "plugins/modules/ufw_connlimit.py",
        "mode=0o750 if hooked else 0o640",
        "mode=0o750",
        "tests/unit/plugins/modules/test_ufw_connlimit.py::test_after_init_is_left_as_it_is_where_nothing_calls_the_hook"),
    "traefik_inflight: a run cut off before its restart is not finished by the next (issue 62)": (
        "plugins/modules/traefik_inflight.py",
        '    plan["restart"] = plan["restart"] or flight["restart"]',
        '    plan["restart"] = plan["restart"]',
        "tests/unit/plugins/modules/test_traefik_inflight_module.py::"
        "test_a_run_cut_off_before_its_restart_is_found_and_finished_by_the_next"),
    "interrupt harness: a file of ours left after the undo not reported": (
        "tests/support/interrupt.py",
        '        elif key not in before:\n            out["added"].append(key)',
        '        elif key not in before:\n            pass',
        "tests/dev/test_interrupt.py::test_the_comparison_names_every_file_not_back_and_everything_left"),
    "interrupt harness: the kill at the start of the task that changes (its change never tried)": (
        "tests/support/interrupt.py",
        '    return [dict([(k, nxt[k]) for k in ("n", "task", "occurrence")], after=cur["task"])',
        '    return [dict([(k, cur[k]) for k in ("n", "task", "occurrence")], after=cur["task"])',
        "tests/dev/test_interrupt.py::test_a_boundary_is_the_start_of_each_task_after_one_that_changed_a_host"),

    "prove url: a url that reaches another server (DSM's nginx on 443) taken for Traefik's": (
        "plugins/module_utils/traefik/entrypoint_url.py",
        "    u = urlsplit(url)\n",
        "    return None\n    u = urlsplit(url)\n",
        UNIT + "test_traefik_entrypoint_url.py::test_a_url_at_dsm_s_443_is_refused_naming_where_traefik_listens"),
    "prove inflight: a 200 without the route's mark (another server) taken for the route served": (
        "plugins/modules/prove_inflight.py",
        '        if status == 200 and headers.get(MARK.lower()) == the_plan["route"]:',
        "        if status == 200:",
        "tests/unit/plugins/modules/test_prove_inflight.py::test_another_server_answering_200_is_never_taken_for_the_route"),
    "prove autoheal: an answer while Traefik is still wedged taken for Traefik serving": (
        "plugins/modules/prove_autoheal.py",
        "        if answered and not restarted:\n            raise NotTraefik()",
        "        if answered and not restarted and False:\n            raise NotTraefik()",
        "tests/unit/plugins/modules/test_prove_autoheal.py::"
        "test_an_answer_while_traefik_is_still_wedged_is_another_server_and_ends_the_wedge"),
    "playbooks: an unreachable host dropped by Ansible, ending the run when it was a play's last": (
        "playbooks/tasks/reach.yml",
        "  ignore_unreachable: true\n",
        "",
        "tests/lab/test_status_fresh_host.py::test_one_host_down_in_each_group_does_not_stop_the_others[status-args1]"),
    # issue 63: the bounds on all sources together, the tunnel's total, the many-source generator
    "ufw total: counted per address (mask 32) instead of all sources together": (
        "plugins/module_utils/ufw/total.py",
        "--connlimit-above %d --connlimit-mask 0 -m comment",
        "--connlimit-above %d --connlimit-mask 32 -m comment",
        "tests/lab/test_total_bound_rules.py::test_the_total_holds_the_count_of_all_sources_together"),
    "ufw rate: an 'up to' bucket that accepts, its excess falling through to ufw's allow rules": (
        "plugins/module_utils/ufw/total.py",
        '    return ("-A %s %s -m hashlimit --hashlimit-above %d/sec --hashlimit-burst %d --hashlimit-name %s "\n'
        '            "--hashlimit-htable-expire %d -m comment --comment %s -j REJECT --reject-with tcp-reset"',
        '    return ("-A %s %s -m hashlimit --hashlimit-upto %d/sec --hashlimit-burst %d --hashlimit-name %s "\n'
        '            "--hashlimit-htable-expire %d -m comment --comment %s -j ACCEPT"',
        "tests/lab/test_total_bound_rules.py::test_the_rate_bound_holds_new_connections_a_second"),
    "ufw rate: the bucket's entry left to iptables' expiry (a pause gives the whole burst back)": (
        "plugins/module_utils/ufw/total.py",
        '"--hashlimit-htable-expire %d -m comment --comment %s -j REJECT --reject-with tcp-reset"\n'
        "            % (chain, _match(port, docker), rate, burst, RATE_NAME % port, expire_ms(rate, burst), TAG))",
        '"-m comment --comment %s -j REJECT --reject-with tcp-reset"\n'
        "            % (chain, _match(port, docker), rate, burst, RATE_NAME % port, TAG))",
        "tests/lab/test_total_bound_rules.py::test_a_pause_does_not_give_the_whole_burst_back"),
    "diagnose: the total's rejections read as one address's": (
        "plugins/module_utils/signals.py",
        "#conn src/[1-9]\\d* > (\\d+)",
        "#conn src/\\d+ > (\\d+)",
        UNIT + "test_ufw_total.py::test_the_per_address_counter_never_counts_the_total"),
    "traefik tunnel: the total before the pool header (a client's own header splits the count)": (
        "plugins/module_utils/traefik/tunnel.py",
        '[m for m in mws if m not in refs.values()] + [refs["pool"], refs["total"]]',
        '[m for m in mws if m not in refs.values()] + [refs["total"], refs["pool"]]',
        "tests/lab/test_traefik_tunnel_live.py::test_the_tunnels_total_holds_many_addresses_and_never_the_lan[3]"),
    "floodgen: connections not bound to their source addresses": (
        "tests/support/loadgen_go/cmd/floodgen/run.go",
        "	d := net.Dialer{Deadline: connectBy, LocalAddr: &net.TCPAddr{IP: r.cfg.Sources[src]}, Control: freebind}",
        "	d := net.Dialer{Deadline: connectBy}",
        "tests/dev/test_floodgen.py::test_each_source_gets_its_share_and_every_connection_is_held"),
}

IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "output", "results", "build", "*.tar.gz")


def pytest(copy, test):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test],
                          cwd=copy, capture_output=True, text=True, timeout=300, check=False)


def main(names):
    chosen = names or sorted(MUTATIONS)
    unknown = [n for n in chosen if n not in MUTATIONS]
    if unknown:
        print("no such mutation: %s" % ", ".join(unknown))
        return 2
    survived = []
    with tempfile.TemporaryDirectory(prefix="homelab-edge-mutations-") as tmp:
        copy = os.path.join(tmp, "edge")
        shutil.copytree(ROOT, copy, ignore=IGNORE, symlinks=True)
        for name in chosen:
            path, old, new, test = MUTATIONS[name]
            target = os.path.join(copy, path)
            with open(target) as f:
                original = f.read()
            if original.count(old) != 1:
                print("STALE    %s: the text to mutate is not in %s once; update tests/mutations.py" % (name, path))
                survived.append(name)
                continue
            t0 = time.time()
            clean = pytest(copy, test)
            with open(target, "w") as f:
                f.write(original.replace(old, new))
            try:
                mutated = pytest(copy, test)
            finally:
                with open(target, "w") as f:
                    f.write(original)
            if clean.returncode != 0:
                print("BROKEN   %s: %s fails without the mutation:\n%s" % (name, test, clean.stdout[-1500:]))
                survived.append(name)
            elif mutated.returncode == 0:
                print("SURVIVED %s: %s passes with it" % (name, test))
                survived.append(name)
            else:
                print("killed   %s (%s, %.1f s)" % (name, test.split("/")[-1], time.time() - t0))
    print("%d of %d mutations killed" % (len(chosen) - len(survived), len(chosen)))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
