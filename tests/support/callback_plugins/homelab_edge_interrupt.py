# -*- coding: utf-8 -*-
# Copyright: (c) 2026, homelab.edge contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test only (tests/support: not in the collection's tarball). Records every task a play starts, with what it did on
each host, and ends the controller at the start of a chosen task the way a closed laptop does: SIGKILL to
ansible-playbook's whole process group (its workers and their SSH clients), nothing flushed, no handler run.
The kill comes before the task is sent to any host: every task before it has ended on every host (the linear
strategy), and it has not begun anywhere.

Enable it with ANSIBLE_CALLBACK_PLUGINS=<this directory> ANSIBLE_CALLBACKS_ENABLED=homelab_edge_interrupt, and run
ansible-playbook as the leader of a process group of its own (start_new_session=True).

  HOMELAB_EDGE_INTERRUPT_RECORD      a file: one JSON line per event, appended and flushed as it happens -
                                     {"start": N, "task": "ROLE : NAME", "occurrence": K} when task N starts (NAME
                                     alone outside a role; N counts
                                     from 1 over the tasks and handlers the controller starts, in every play: a task
                                     whose condition turns out false on every host starts all the same and is
                                     skipped there; meta tasks are not counted; K counts the starts of that task,
                                     from 1), {"task": N, "host": ..., "status": ok|changed|skipped|failed|ignored|
                                     unreachable} for each host's result, {"stats": {host: {changed, failures, ...}}}
                                     at the end, {"killed": N, "task": ..., "occurrence": K} right before the kill.
  HOMELAB_EDGE_INTERRUPT_TASK        "ROLE : NAME" (NAME outside a role): kill when that task starts ...
  HOMELAB_EDGE_INTERRUPT_OCCURRENCE  ... for the K-th time (default 1). Unset: record only.
  HOMELAB_EDGE_INTERRUPT_DELAY       seconds: kill that long after the task started instead, while it runs on the
                                     hosts (a change in flight); the record says {"killed": ..., "delay": S}.

Every event carries "t", the time it was written."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: homelab_edge_interrupt
type: aggregate
short_description: Test only - record task starts and results, kill the controller when a chosen task starts
description:
  - See the module docstring. Not shipped.
requirements:
  - enabled in callbacks_enabled
"""

import json
import os
import signal
import threading
import time

from ansible.plugins.callback import CallbackBase


def label(task):
    """How the record names a task: "ROLE : NAME" in a role, as Ansible shows it, NAME elsewhere."""
    return task.get_name().strip()


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "homelab_edge_interrupt"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self.path = os.environ.get("HOMELAB_EDGE_INTERRUPT_RECORD")
        self.target = os.environ.get("HOMELAB_EDGE_INTERRUPT_TASK")
        self.occurrence = int(os.environ.get("HOMELAB_EDGE_INTERRUPT_OCCURRENCE") or 1)
        self.delay = float(os.environ.get("HOMELAB_EDGE_INTERRUPT_DELAY") or 0)
        self.count = 0
        self.seen = {}  # label -> starts so far
        self.numbers = {}  # task uuid -> N of its latest start

    def write(self, event):
        if not self.path:
            return
        event["t"] = round(time.time(), 3)
        with open(self.path, "a") as f:
            f.write(json.dumps(event, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def started(self, task):
        self.count += 1
        name = label(task)
        self.seen[name] = self.seen.get(name, 0) + 1
        self.numbers[task._uuid] = self.count
        kill = name == self.target and self.seen[name] == self.occurrence
        if kill and not self.delay:
            self.write({"killed": self.count, "task": name, "occurrence": self.seen[name]})
            os.killpg(os.getpgrp(), signal.SIGKILL)
        self.write({"start": self.count, "task": name, "occurrence": self.seen[name]})
        if kill:
            event = {"killed": self.count, "task": name, "occurrence": self.seen[name], "delay": self.delay}

            def later():
                self.write(event)
                os.killpg(os.getpgrp(), signal.SIGKILL)
            timer = threading.Timer(self.delay, later)
            timer.daemon = True
            timer.start()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.started(task)

    def v2_playbook_on_handler_task_start(self, task):
        self.started(task)

    def result(self, result, status):
        changed = bool(result._result.get("changed"))
        self.write({"task": self.numbers.get(result._task._uuid), "host": result._host.get_name(),
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
