"""``PreparedTxnState``: what a two-phase commit producer's ``prepare_transaction()`` returns (KIP-939).

The external coordinator stores it with its own decision (a database row, a checkpoint file) and hands
it back to ``complete_transaction()``: a producer that finds a prepared transaction written by exactly
this producer id and epoch commits it, and aborts anything else. As Kafka's class, its text form is
``"<producer id>:<epoch>"`` (the empty string when no transaction is prepared), so it travels in any
store that keeps strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class PreparedTxnState:
    producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_PRODUCER_EPOCH

    @property
    def has_transaction(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID and self.epoch != NO_PRODUCER_EPOCH

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.epoch}" if self.has_transaction else ""

    @classmethod
    def from_string(cls, text: str) -> PreparedTxnState:
        """The state ``str(state)`` wrote; ValueError for anything else."""
        if text is None or not text.strip():
            return cls()
        producer_id, sep, epoch = text.strip().partition(":")
        try:
            if not sep:
                raise ValueError
            state = cls(int(producer_id), int(epoch))
        except ValueError:
            raise ValueError(f"not a prepared transaction state (producer id:epoch): {text!r}") from None
        if state.producer_id < 0 or not 0 <= state.epoch <= 32767:
            raise ValueError(f"not a prepared transaction state (producer id:epoch): {text!r}")
        return state
