"""Kafka 4.4's streams `StickyTaskAssignor` (group-coordinator, `streams/assignor/StickyTaskAssignor`
and `ProcessState`), step for step.

Active tasks go first to the member that holds them, then to a member that holds them as a standby
or reports changelog offsets for them (a member restarted under a new member id has no tasks, but
its local state shows in its task offsets), then to the least loaded process, while each member
stays within its share. Standbys of a stateful task go to its previous active member, then to its
best standby candidate (members holding it as a standby before those that only report offsets, the
most caught-up first), then to the least loaded process that has not got the task. Java's hash-map
and heap orders break ties there; here members go by id and processes by their first member, so
the outcome is deterministic.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from gateway.store.streams_groups import StreamsMemberDoc, Tasks, TasksTuple

Task = tuple[str, int]  # subtopology id, partition


@dataclass
class _Process:
    """Kafka's `ProcessState`: a process's members, their task counts and its load (tasks per member)."""

    process_id: str
    order: int  # the tie-break between equally loaded processes
    capacity: int = 0
    load: float = sys.float_info.max
    task_count: int = 0
    member_tasks: dict[str, int] = field(default_factory=dict)
    active: dict[str, set[Task]] = field(default_factory=dict)
    standby: dict[str, set[Task]] = field(default_factory=dict)
    tasks: set[Task] = field(default_factory=set)
    by_load: list[tuple[int, int, str]] | None = None

    def add_member(self, member_id: str) -> None:
        self.member_tasks[member_id] = 0
        self.capacity += 1
        self._compute_load()

    def _compute_load(self) -> None:
        self.load = -1 if self.capacity <= 0 else self.task_count / self.capacity

    def add(self, member_id: str, task: Task, active: bool) -> int:
        """The member's task count after; its heap of members is rebuilt at the next use."""
        count = self._add(member_id, task, active)
        self.by_load = None
        return count

    def _add(self, member_id: str, task: Task, active: bool) -> int:
        self.task_count += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, set()).add(task)
        self.member_tasks[member_id] += 1
        self._compute_load()
        return self.member_tasks[member_id]

    def add_to_least_loaded(self, task: Task, active: bool) -> int:
        """To the member with the fewest tasks: its count after, -1 when the process has no member."""
        if not self.member_tasks:
            return -1
        if len(self.member_tasks) == 1:
            return self._add(next(iter(self.member_tasks)), task, active)
        if self.by_load is None:
            self.by_load = [(n, i, mid) for i, (mid, n) in enumerate(self.member_tasks.items())]
            heapq.heapify(self.by_load)
        _, i, mid = heapq.heappop(self.by_load)
        count = self._add(mid, task, active)
        heapq.heappush(self.by_load, (count, i, mid))
        return count


@dataclass
class _State:
    """Kafka's `StickyTaskAssignor.LocalState`."""

    standby_replicas: int
    processes: dict[str, _Process]
    prev_active: dict[Task, tuple[str, str]]  # task -> (process, member)
    prev_standby: dict[Task, list[tuple[str, str]]]  # task -> ranked candidates
    total_active: int
    total: int
    with_active_capacity: int
    with_capacity: int
    active_per_member: int = 0
    total_per_member: int = 0


def _per_member(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


def assign(members: Mapping[str, StreamsMemberDoc], tasks: Mapping[str, int], stateful: Collection[str],
           standby_replicas: int) -> dict[str, TasksTuple]:
    """The target of `members` (what they hold and the offsets they reported) for `tasks` (subtopology
    -> task count); the subtopologies in `stateful` (with changelogs) get `standby_replicas` standbys."""
    if not members:
        return {}
    st = _initialize(members, tasks, stateful, standby_replicas)
    _assign_active(st, [(s, p) for s in tasks for p in range(tasks[s])])
    if standby_replicas > 0:
        _assign_standby(st, [(s, p) for s in tasks if s in stateful for p in range(tasks[s])])
    active = {mid: ts for p in st.processes.values() for mid, ts in p.active.items()}
    standby = {mid: ts for p in st.processes.values() for mid, ts in p.standby.items()}
    return {mid: TasksTuple(_tasks(active.get(mid, set())), _tasks(standby.get(mid, set())), {})
            for mid in sorted(members)}


def _initialize(members: Mapping[str, StreamsMemberDoc], tasks: Mapping[str, int], stateful: Collection[str],
                standby_replicas: int) -> _State:
    total_active = sum(tasks.values())
    total = total_active + sum(n * standby_replicas for s, n in tasks.items() if s in stateful)
    st = _State(standby_replicas, {}, {}, {}, total_active, total, len(members), len(members))
    st.active_per_member = _per_member(st.total_active, st.with_active_capacity)
    st.total_per_member = _per_member(st.total, st.with_capacity)
    candidates: dict[Task, list[tuple[int, int, tuple[str, str]]]] = {}
    for mid in sorted(members):
        m = members[mid]
        process = st.processes.setdefault(m.process_id, _Process(m.process_id, len(st.processes)))
        process.add_member(mid)
        member = (m.process_id, mid)
        for s, ps in m.assigned.active.items():
            for p in ps:
                st.prev_active[(s, p)] = member
        # Kafka 4.4's collectStandbyCandidates: a standby it holds (ranked by the offsets reported
        # for it, none being 0), then a task it only reports offsets for
        for s, ps in m.assigned.standby.items():
            for p in ps:
                candidates.setdefault((s, p), []).append((0, -m.task_offsets.get(s, {}).get(p, 0), member))
        for s, offsets in m.task_offsets.items():
            for p, offset in offsets.items():
                if p not in m.assigned.standby.get(s, frozenset()):
                    candidates.setdefault((s, p), []).append((1, -offset, member))
    # Kafka's STANDBY_CANDIDATE_ORDER, a stable sort
    st.prev_standby = {t: [m for _, _, m in sorted(cs, key=lambda c: c[:2])] for t, cs in candidates.items()}
    return st


def _added_active(st: _State, count: int) -> None:
    """Kafka's maybeUpdateActiveTasksPerMember and maybeUpdateTotalTasksPerMember after an active task."""
    if count == st.active_per_member:
        st.with_active_capacity -= 1
        st.total_active -= count
        st.active_per_member = _per_member(st.total_active, st.with_active_capacity)
    _added(st, count)


def _added(st: _State, count: int) -> None:
    if count == st.total_per_member:
        st.with_capacity -= 1
        st.total -= count
        st.total_per_member = _per_member(st.total, st.with_capacity)


def _assign_active(st: _State, tasks: list[Task]) -> None:
    tasks.sort(key=lambda t: (t[1], t[0]))  # partition first: a range-like assignment stays sticky
    left: list[Task] = []
    for task in tasks:  # 1. to the member that had it
        prev = st.prev_active.get(task)
        if prev is not None and st.processes[prev[0]].member_tasks[prev[1]] < st.active_per_member:
            _added_active(st, st.processes[prev[0]].add(prev[1], task, True))
        else:
            left.append(task)
    tasks, left = left, []
    for task in tasks:  # 2. to a member with its state
        prev = _least_loaded_prev(st, st.prev_standby.get(task, []), None)
        if prev is not None and st.processes[prev[0]].member_tasks[prev[1]] < st.active_per_member:
            _added_active(st, st.processes[prev[0]].add(prev[1], task, True))
        else:
            left.append(task)
    left.sort()  # 3. the rest, by subtopology, to the least loaded process
    queue = [(p.load, p.order, p.process_id) for p in st.processes.values()]
    heapq.heapify(queue)
    for task in left:
        _, order, pid = heapq.heappop(queue)
        process = st.processes[pid]
        count = process.add_to_least_loaded(task, True)
        if count == -1:
            raise AssertionError(f"No member available to assign active task {task}.")
        _added_active(st, count)
        heapq.heappush(queue, (process.load, order, pid))


def _least_loaded_prev(st: _State, members: list[tuple[str, str]], task: Task | None) -> tuple[str, str] | None:
    """Kafka's findPrevMemberWithLeastLoad: the first candidate, replaced only by one whose process
    and member are both less loaded; with `task`, a process that has the task already is passed over."""
    found: tuple[str, str] | None = None
    process_load = member_load = sys.float_info.max
    for pid, mid in members:
        process = st.processes[pid]
        if task is not None and task in process.tasks:
            continue
        load, count = process.load, process.member_tasks[mid]
        if found is None or (load < process_load and count < member_load):
            found, process_load, member_load = (pid, mid), load, count
    return found


def _assign_standby(st: _State, tasks: list[Task]) -> None:
    tasks.sort(key=lambda t: (t[1], t[0]), reverse=True)
    to_least_loaded: list[tuple[Task, int]] = []
    for task in tasks:
        for i in range(st.standby_replicas):
            prev = st.prev_active.get(task)
            if prev is not None:
                process = st.processes[prev[0]]
                if task not in process.tasks and process.member_tasks[prev[1]] < st.total_per_member:
                    _added(st, process.add(prev[1], task, False))
                    continue
            prev = _least_loaded_prev(st, st.prev_standby.get(task, []), task)
            if prev is not None and st.processes[prev[0]].member_tasks[prev[1]] < st.total_per_member:
                _added(st, st.processes[prev[0]].add(prev[1], task, False))
                continue
            to_least_loaded.append((task, st.standby_replicas - i))
            break
    to_least_loaded.sort(reverse=True)
    queue = [(p.load, p.order, p.process_id) for p in st.processes.values()]
    heapq.heapify(queue)
    for task, remaining in to_least_loaded:
        for _ in range(remaining):
            if not _standby_to_least_loaded(st, queue, task):
                break  # Kafka logs that there is not enough capacity for the standbys asked for


def _standby_to_least_loaded(st: _State, queue: list[tuple[float, int, str]], task: Task) -> bool:
    """Kafka's assignStandbyToMemberWithLeastLoad: the least loaded process without the task."""
    if not queue:
        return False
    _, order, pid = heapq.heappop(queue)
    process = st.processes[pid]
    found = False
    if task not in process.tasks:
        count = process.add_to_least_loaded(task, False)
        if count != -1:
            found = True
            _added(st, count)
    elif queue:
        found = _standby_to_least_loaded(st, queue, task)
    heapq.heappush(queue, (process.load, order, pid))
    return found


def _tasks(pairs: set[Task]) -> Tasks:
    out: dict[str, set[int]] = {}
    for s, p in pairs:
        out.setdefault(s, set()).add(p)
    return {s: frozenset(ps) for s, ps in sorted(out.items())}
