"""The suite's own scheduling (tests/support/scheduling.py): with three workers the Slurm group and the
modules marked ``waits`` go to one worker, first, and that worker then helps with the other groups; with
two, any worker takes any group."""

from __future__ import annotations

from types import SimpleNamespace

from support.scheduling import WAITS, ApartScheduling

COLLECTION = [
    *(f"tests/m{k}.py::test_1@tests/m{k}.py" for k in range(6)),
    "tests/slurm/test_slurm.py::test_1@slurm",
    "tests/b.py::test_1@tiers",
    "tests/b.py::test_2@tiers",
    "tests/slurm/test_slurm.py::test_2@slurm",
    "tests/d.py::test_1@paper",
    f"tests/c.py::test_1@{WAITS}tests/c.py",
]


# the Slurm group outlasts the others' groups: the waiting modules behind it are left when they run out
LONG_SLURM = [
    *(f"tests/slurm/test_slurm.py::test_{k}@slurm" for k in range(8)),
    *(f"tests/waits{k}.py::test_1@{WAITS}tests/waits{k}.py" for k in range(4)),
    *(f"tests/m{k}.py::test_1@tests/m{k}.py" for k in range(2)),
]

# the waiting worker's groups are short ones of two tests, the others' long
SHORT_WAITS = [
    *(f"tests/slurm/test_slurm.py::test_{k}@slurm" for k in range(2)),
    *(f"tests/waits{k}.py::test_{j}@{WAITS}tests/waits{k}.py" for k in range(4) for j in range(2)),
    *(f"tests/m{k}.py::test_{j}@tests/m{k}.py" for k in range(2) for j in range(6)),
]


class Worker:
    """What the scheduler asks of an xdist worker: tests sent to it, and shutting down."""

    def __init__(self, name: str, collection: list[str]) -> None:
        self.gateway, self.sent, self.shutting_down = SimpleNamespace(id=name), [], False
        self.collection = collection

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(self.collection[i] for i in indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _run(workers: int, collection: list[str] = COLLECTION) -> list[Worker]:
    """Every test of ``collection`` scheduled on ``workers`` workers, each finishing what it was sent in
    turn, one test a round."""
    config = SimpleNamespace(
        getvalue=lambda name: [f"{workers}*popen"], option=SimpleNamespace(loadscopereorder=True)
    )
    sched = ApartScheduling(config)
    nodes = [Worker(f"gw{k}", collection) for k in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    done: dict[Worker, int] = {node: 0 for node in nodes}
    while not sched.tests_finished:
        progressed = False
        for node in nodes:
            if done[node] < len(node.sent):
                sched.mark_test_complete(node, collection.index(node.sent[done[node]]))
                done[node] += 1
                progressed = True
        assert progressed, "tests left that no worker was sent"
    return nodes


def test_three_workers_keep_the_waiting_groups_apart_and_run_every_test_once():
    nodes = _run(3)
    waiting = sorted(t for t in COLLECTION if "@slurm" in t or f"@{WAITS}" in t)
    apart = [n for n in nodes if any("@slurm" in t for t in n.sent)]
    assert len(apart) == 1 and all(n.sent for n in nodes)
    # its own groups first, all of them; then, with none of those left, one of the others' groups
    assert sorted(apart[0].sent[: len(waiting)]) == waiting
    assert apart[0].sent[len(waiting) :] and not set(apart[0].sent[len(waiting) :]) & set(waiting)
    others = [t for n in nodes if n is not apart[0] for t in n.sent]
    assert not set(others) & set(waiting)
    assert sorted(others + apart[0].sent) == sorted(COLLECTION)  # every test once
    assert all(n.shutting_down for n in nodes)


def test_two_workers_take_any_group():
    nodes = _run(2)
    assert sorted(t for n in nodes for t in n.sent) == sorted(COLLECTION)
    slurm = [n for n in nodes if any("@slurm" in t for t in n.sent)]
    assert len(slurm) == 1 and any("@slurm" not in t and f"@{WAITS}" not in t for t in slurm[0].sent)


def test_the_others_take_the_waiting_modules_left_once_their_own_groups_are_handed_out():
    """Before: the other workers shut down with their groups done while the waiting worker still had its
    waiting modules to run one after another (the suite of 2026-12-01: 42 s alone at the end)."""
    nodes = _run(3, LONG_SLURM)
    apart = next(n for n in nodes if any("@slurm" in t for t in n.sent))
    slurm = [t for t in LONG_SLURM if "@slurm" in t]
    assert [t for t in apart.sent if "@slurm" in t] == slurm  # the cluster's group stays on one worker
    helped = [t for n in nodes if n is not apart for t in n.sent if f"@{WAITS}" in t]
    assert helped, [n.sent for n in nodes]
    for n in nodes:
        if n is not apart:  # each helped only after its own groups
            own = [k for k, t in enumerate(n.sent) if "@slurm" not in t and f"@{WAITS}" not in t]
            assert all(k > max(own, default=-1) for k, t in enumerate(n.sent) if f"@{WAITS}" in t), n.sent
    assert sorted(t for n in nodes for t in n.sent) == sorted(LONG_SLURM)  # every test once
    assert all(n.shutting_down for n in nodes)


def test_a_worker_is_sent_its_next_group_only_as_it_starts_its_last_test(monkeypatch):
    """A group sent early is one a worker that runs out first cannot take. Before: xdist's rule, a group
    sent with two tests still to run (the suite of 2026-12-02: the waiting worker held two groups, 30 s,
    that the others had ended 40-50 s before it without)."""
    sent_with: list[int] = []
    assign = ApartScheduling._assign_work_unit

    def counted(self, node):
        sent_with.append(self._pending_of(self.assigned_work.get(node, {})))
        assign(self, node)

    monkeypatch.setattr(ApartScheduling, "_assign_work_unit", counted)
    nodes = _run(3, SHORT_WAITS)
    assert sent_with and max(sent_with) <= 1, sent_with
    assert sorted(t for n in nodes for t in n.sent) == sorted(SHORT_WAITS)  # every test once
