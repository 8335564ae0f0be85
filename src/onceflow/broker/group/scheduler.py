"""The coordinators' timers and clock now live in :mod:`onceflow.broker.coordinator.scheduler`."""

from onceflow.broker.coordinator.scheduler import (
    AsyncioScheduler,
    ManualScheduler,
    Scheduler,
    TimerHandle,
)

__all__ = ["AsyncioScheduler", "ManualScheduler", "Scheduler", "TimerHandle"]
