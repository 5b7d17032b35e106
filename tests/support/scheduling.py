"""How pytest-xdist hands the test groups to its workers (``--dist loadgroup``, tests/conftest.py): the
Slurm cluster's group and the modules marked ``waits`` on a worker of their own, the rest on the others;
a worker whose own groups are all handed out helps with the rest, whichever they are.

The Slurm tests spend most of their time waiting (for the controller to start a job, for a node's silence
to time out, for the next accounting poll) and little on the CPU; the modules marked ``waits`` spend much
of theirs waiting too (servers starting, requests in flight, time limits running out), while the other
groups are mostly CPU, though they wait too (cold reads from disk, the commands they start): the suite
runs three of them at once on two cores (``-n 4``, pyproject.toml). With a worker of their own the
waiting groups wait beside the others instead of in their place, and start at once rather than behind
the CPU-bound groups. Either side may run out first: on 2026-11-29 that worker's own groups ended at
about 460 s of a 600 s run, and it then took the others' groups; on 2026-12-01 the others' ended at
630-640 s and that worker went on alone with its waiting modules to 682 s, so the others now take those
too. A worker is sent its next group only as it starts its current group's last test (an xdist worker
needs the test after the one it runs; xdist's own rule sends it with two still to run): a group sent early
is a group the worker that runs out first cannot take (on 2026-12-02 the waiting worker held two groups,
30 s, that the others ended 40-50 s before it without). Four groups at a time on two cores is less than
the CPU hog the suite is proven beside (issue 58: every test asserts what the run counted, not how fast
it went). With fewer than three workers every worker takes any group, as xdist's own ``loadgroup`` does.
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling

WAITS = "waits:"  # the group of a module marked ``waits`` (tests/conftest.py): this and the module's path


def apart(scope: str) -> bool:
    """Whether the group ``scope`` runs on the worker of its own: the Slurm cluster's, and every module
    marked ``waits``."""
    return scope == "slurm" or scope.startswith(WAITS)


class ApartScheduling(LoadGroupScheduling):
    """``loadgroup``, with the groups ``apart`` names on the last worker and the others on the rest; a
    worker takes the other side's groups once none of its own is left to hand out."""

    def _apart_node(self):
        """The last worker, with three or more (xdist's own ``remove_node``, after a crash, may make another
        the last: it then takes the waiting groups too)."""
        nodes = self.nodes
        return nodes[-1] if len(nodes) >= 3 else None

    def _takes(self, node, scope: str) -> bool:
        apart_node = self._apart_node()
        if apart_node is None:
            return True
        return apart(scope) == (node is apart_node)

    def _next_scope(self, node) -> str | None:
        own = next((s for s in self.workqueue if self._takes(node, s)), None)
        if own is None:  # its own groups are handed out: help with the rest
            return next(iter(self.workqueue), None)
        return own

    def _assign_work_unit(self, node) -> None:
        scope = self._next_scope(node)
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        if self._next_scope(node) is None:
            node.shutdown()  # it ends once the tests already sent to it have run
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return  # the next group only as the worker starts its last test (it needs the next to run it)
        self._assign_work_unit(node)
