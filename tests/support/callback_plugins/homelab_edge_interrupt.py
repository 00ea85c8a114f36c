# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test only (tests/support: not in the collection's tarball). Records every task a play starts, with what it did on
each host, and ends the controller at the start of a chosen task the way a closed laptop does: SIGKILL to
ansible-playbook's whole process group (its workers and their SSH clients), nothing flushed, no handler run.

Enable it with ANSIBLE_CALLBACK_PLUGINS=<this directory> ANSIBLE_CALLBACKS_ENABLED=homelab_edge_interrupt, and run
ansible-playbook as the leader of a process group of its own (start_new_session=True).

  HOMELAB_EDGE_INTERRUPT_RECORD   a file: one JSON line per event, appended and flushed as it happens -
                                  {"start": N, "name": ..., "role": ...} when task N starts (N counts from 1 over
                                  the tasks and handlers the controller starts, in every play: a task whose
                                  condition turns out false on every host starts all the same and is skipped there;
                                  meta tasks are not counted), {"task": N, "host": ..., "status": ok|changed|
                                  skipped|failed|ignored|unreachable} for each host's result, {"stats": {host: {changed, failures, ...}}}
                                  at the end, {"killed": N, "name": ...} right before the kill.
  HOMELAB_EDGE_INTERRUPT_AT       N: kill when task N starts (unset: record only).
  HOMELAB_EDGE_INTERRUPT_NAME     the name task N must have; when another task starts there, the run is killed
                                  all the same and the record says {"drifted": N, "name": ..., "expected": ...}."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: homelab_edge_interrupt
type: aggregate
short_description: Test only - record task starts and results, kill the controller at task N
description:
  - See the module docstring. Not shipped.
requirements:
  - enabled in callbacks_enabled
"""

import json
import os
import signal

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "homelab_edge_interrupt"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self.path = os.environ.get("HOMELAB_EDGE_INTERRUPT_RECORD")
        at = os.environ.get("HOMELAB_EDGE_INTERRUPT_AT")
        self.at = int(at) if at else None
        self.expected = os.environ.get("HOMELAB_EDGE_INTERRUPT_NAME")
        self.count = 0
        self.numbers = {}  # task uuid -> N

    def write(self, event):
        if not self.path:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(event, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def started(self, task):
        self.count += 1
        self.numbers[task._uuid] = self.count
        name = task.get_name().strip()
        role = task._role.get_name() if task._role else None
        if self.at == self.count:
            if self.expected is not None and name != self.expected:
                self.write({"drifted": self.count, "name": name, "expected": self.expected})
            self.write({"killed": self.count, "name": name})
            os.killpg(os.getpgrp(), signal.SIGKILL)
        self.write({"start": self.count, "name": name, "role": role})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.started(task)

    def v2_playbook_on_handler_task_start(self, task):
        self.started(task)

    def result(self, result, status):
        task = result._task
        changed = bool(result._result.get("changed"))
        self.write({"task": self.numbers.get(task._uuid), "host": result._host.get_name(),
                    "status": "changed" if status == "ok" and changed else status})

    def v2_runner_on_ok(self, result):
        self.result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self.result(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self.result(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self.result(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        self.write({"stats": dict((h, stats.summarize(h)) for h in sorted(stats.processed))})
