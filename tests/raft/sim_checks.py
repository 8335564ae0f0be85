"""What the simulator checks (mixed into ``sim.Simulation``): the listener's view of every process
and the invariants after every step. ``sim`` says what each invariant is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onceflow.raft.listener import Commit, LeaderChange, LoadSnapshot
from onceflow.raft.quorum_state import Role

if TYPE_CHECKING:
    from tests.raft.sim import Process


class InvariantChecks:
    # ------------------------------------------------------------------ the listener

    def _on_event(self, process: Process, event) -> None:
        machine = process.machine
        if isinstance(event, Commit):
            batch = event.batch
            expected = 0 if machine.next_offset is None else machine.next_offset
            if batch.base_offset != expected:
                self.fail(
                    f"node {process.node_id}'s listener expected offset {expected}, got a batch at {batch.base_offset}"
                )
            hw = process.node.high_watermark
            if hw is None or batch.next_offset > hw:
                self.fail(
                    f"node {process.node_id} delivered batch [{batch.base_offset}, {batch.last_offset}] above its high watermark {hw}"
                )
            self._learn_committed(process, batch.next_offset)
            for i, offset in enumerate(range(batch.base_offset, batch.next_offset)):
                epoch, payload = self.committed[offset]
                mine = "control" if batch.is_control else batch.records[i]
                if (epoch, payload) != (batch.epoch, mine):
                    self.fail(
                        f"node {process.node_id} delivered {mine!r}@{batch.epoch} at {offset}; committed is {payload!r}@{epoch}"
                    )
            machine.values.extend(batch.records)
            machine.next_offset = batch.next_offset
        elif isinstance(event, LoadSnapshot):
            snapshot = event.snapshot
            values = list(snapshot.records)
            self._learn_committed(process, snapshot.offset)
            expected = [p for _, p in self.committed[: snapshot.offset] if p != "control"]
            if values != expected:
                self.fail(
                    f"node {process.node_id} loaded snapshot {snapshot.snapshot_id} that is not the committed prefix"
                )
            machine.values = values
            machine.next_offset = snapshot.offset
            self.snapshots_loaded += 1
        elif isinstance(event, LeaderChange):
            machine.leader = (event.leader_id, event.epoch)
            if event.leader_id == process.node_id:
                leader = process.node.leader
                if leader is None or (machine.next_offset or 0) < leader.epoch_start_offset:
                    self.fail(f"node {process.node_id} told its listener it leads before it replayed the log")

    def _learn_committed(self, process: Process, upto: int) -> None:
        """Record the entries of ``process``'s log below ``upto`` (committed: below its HW) as the
        committed log where nothing was known, after checking the known part against them."""
        have = len(self.committed)
        if upto <= have:
            return
        storage = process.storage
        if storage.log_start_offset > have:
            # Only a snapshot covers the gap: the values are checked when a listener loads one.
            snapshot = storage.latest_snapshot_id()
            if snapshot is None or snapshot.offset < storage.log_start_offset:
                self.fail(
                    f"node {process.node_id}: committed offsets [{have}, {storage.log_start_offset}) are nowhere"
                )
            return
        for batch in storage.read(have, 1 << 40, end_offset=upto):
            for i, offset in enumerate(range(batch.base_offset, batch.next_offset)):
                if offset == len(self.committed):
                    payload = "control" if batch.is_control else batch.records[i]
                    self.committed.append((batch.epoch, payload))
                    if payload != "control":
                        self.committed_values.append(payload)

    # ------------------------------------------------------------------ invariants

    def _check(self, acted: Process | None) -> None:
        majority = len(self.voter_ids) // 2 + 1
        for process in self.processes.values() if acted is None else (acted,):
            node = process.node
            if node is None:
                continue
            state = node.state
            self.max_epoch = max(self.max_epoch, state.epoch)
            if state.role is Role.LEADER:
                known = self.leaders.setdefault(state.epoch, process.node_id)
                if known != process.node_id:
                    self.fail(f"two leaders in epoch {state.epoch}: {known} and {process.node_id}")
            hw = node.high_watermark
            if hw is not None:
                if process.last_hw is not None and hw < process.last_hw:
                    self.fail(f"node {process.node_id}'s high watermark went from {process.last_hw} to {hw}")
                process.last_hw = hw
                self._learn_committed(process, hw)
                self._check_log(process, hw)
        if acted is None or len(self.committed) != self._durable_checked_end:
            self._durable_checked_end = len(self.committed)
            self._check_durable(majority, None)
        elif acted.is_voter:
            self._check_durable(majority, acted)
        if acted is None or self._group is None or acted.node_id not in self._group_ids:
            self._group = self._connected_majority(majority)
            self._group_ids = set(self._group or ())
        self._check_liveness()

    def _check_log(self, process: Process, hw: int) -> None:
        """The node's entries below its high watermark are the committed ones."""
        storage = process.storage
        start = max(process.checked_to, storage.log_start_offset)
        upto = min(hw, storage.log_end_offset, len(self.committed))
        if start >= upto:
            return
        for batch in storage.read(start, 1 << 40, end_offset=upto):
            for i, offset in enumerate(range(batch.base_offset, batch.next_offset)):
                if offset < start:
                    continue
                payload = "control" if batch.is_control else batch.records[i]
                if self.committed[offset] != (batch.epoch, payload):
                    self.fail(
                        f"node {process.node_id} has {payload!r}@{batch.epoch} at committed offset {offset}, "
                        f"committed is {self.committed[offset]!r}"
                    )
        process.checked_to = upto

    def _check_durable(self, majority: int, acted: Process | None) -> None:
        """The last committed entry is on the disks of a majority of voters (rechecked for the voter
        that acted, or for all when the committed log grew)."""
        end = len(self.committed)
        if end == 0:
            return
        epoch = self.committed[end - 1][0]
        voters = self.voter_ids if acted is None else (acted.node_id,)
        for v in voters:
            self._holds[v] = self.processes[v].storage.durably_holds(end - 1, epoch)
        holders = sum(self._holds.values())
        if holders < majority:
            self.fail(
                f"committed offset {end - 1} (epoch {epoch}) is durable on {holders} voters, fewer than a majority"
            )

    def _connected_majority(self, majority: int) -> list[int] | None:
        up = [v for v in self.voter_ids if self.processes[v].node is not None]
        groups: list[list[int]] = []
        for v in up:
            for group in groups:
                if all((v, g) not in self.blocked and (g, v) not in self.blocked for g in group):
                    group.append(v)
                    break
            else:
                groups.append([v])
        best = max(groups, key=len, default=[])
        return best if len(best) >= majority else None

    def _check_liveness(self) -> None:
        """Once the network is calm, a connected majority is never without a leader that has
        committed in its epoch for longer than the bound."""
        if self.now < self._calm_from:
            return
        group = self._group
        if group is None:
            self._led_since = self.now
            return
        for v in group:
            node = self.processes[v].node
            if (
                node.state.role is Role.LEADER
                and node.leader is not None
                and node.leader.high_watermark is not None
            ):
                self._led_since = self.now
                return
        since = max(self._stable_since, self._led_since, self._calm_from)
        if self.now - since > self._bound:
            states = {v: str(self.processes[v].node.state) for v in group}
            self.fail(f"voters {group} can talk but have had no leader for {self.now - since} ms: {states}")

    def _converged(self) -> bool:
        """Everything is committed and every live process has seen all of it (the run may end)."""
        leader = None
        for process in self.processes.values():
            node = process.node
            if node is None:
                return False
            if node.state.role is Role.LEADER:
                leader = node
        if leader is None or leader.leader is None or leader.has_pending_appends:
            return False
        hw = leader.leader.high_watermark
        if hw is None or hw != leader.storage.log_end_offset:
            return False
        return all(
            p.node.high_watermark == hw and p.machine.next_offset == hw for p in self.processes.values()
        )

    def _check_end(self) -> None:
        """Log matching over the whole logs: two entries with the same offset and epoch have the
        same history before them."""
        logs = {}
        for process in self.processes.values():
            entries = {}
            for batch in process.storage.read(process.storage.log_start_offset, 1 << 40):
                for i, offset in enumerate(range(batch.base_offset, batch.next_offset)):
                    entries[offset] = (batch.epoch, "control" if batch.is_control else batch.records[i])
            logs[process.node_id] = entries
        ids = sorted(logs)
        for a_index, a in enumerate(ids):
            for b in ids[a_index + 1 :]:
                shared = sorted(set(logs[a]) & set(logs[b]), reverse=True)
                matched = False
                for offset in shared:
                    same = logs[a][offset] == logs[b][offset]
                    if matched and not same:
                        self.fail(f"logs of {a} and {b} agree at a later offset but differ at {offset}")
                    if same and logs[a][offset][0] == logs[b][offset][0]:
                        matched = True
