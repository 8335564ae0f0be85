"""The broker's log cleaner: every ``log.cleaner.backoff.ms`` each compacted partition that is due is
cleaned (``onceflow.log.cleaner``), one partition at a time.

The plan and the install run on the event loop (they read and change the ``Log``); the build, which
reads and rewrites whole segments, runs in a worker process of its own (started at the first cleaning,
``spawn``), so a big cleaning neither stalls requests nor slows them. A worker thread would not do:
the build is Python and holds the GIL, and while it ran (1.2 s for a 100 MB segment here) the event loop
got the GIL back only every switch interval, ~5 ms late at each wake-up instead of ~0.2 ms. Where no
process can be started the build falls back to a thread. A log that changed under its build
(retention, DeleteRecords, a deleted topic) is left as it is; the next pass plans again.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from onceflow.log import cleaner
from onceflow.log.log import wall_clock_ms

log = logging.getLogger(__name__)


class LogCleaner:
    def __init__(
        self, topics: Any, backoff_ms: int, dedupe_buffer_bytes: int = cleaner.DEDUPE_BUFFER_BYTES
    ) -> None:
        self._topics = topics
        self._backoff_s = backoff_ms / 1000.0
        self._dedupe_buffer_bytes = dedupe_buffer_bytes
        self._executor: Executor | None = None  # made at the first cleaning
        self.cleanings = 0  # installed cleanings since start (tests and logs)

    def _worker(self) -> Executor:
        if self._executor is None:
            try:
                executor: Executor = ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn")
                )
                executor.submit(int).result()  # started now, so a failure to start shows here
            except Exception as exc:
                log.warning("log cleaner: no worker process (%s); cleaning on a thread instead", exc)
                executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-cleaner")
            self._executor = executor
        return self._executor

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._backoff_s)
            await self.clean_once()

    async def clean_once(self) -> int:
        """One pass over every compacted partition; returns how many were cleaned."""
        cleaned = 0
        for partition in list(self._topics.partitions()):
            log_ = partition.log
            config = getattr(log_, "config", None)
            if config is None or not config.compact:
                continue
            try:
                cleaning = cleaner.plan(log_, wall_clock_ms(), max_map_bytes=self._dedupe_buffer_bytes)
                if cleaning is None:
                    continue
                loop = asyncio.get_running_loop()
                try:
                    result = await loop.run_in_executor(self._worker(), cleaner.build, cleaning)
                except BrokenProcessPool:
                    log.error("log cleaner: the worker process died; a new one takes the next cleaning")
                    self._executor = None
                    continue
                if not self._still_serving(partition):
                    for group in result.groups:
                        group.path.unlink(missing_ok=True)
                    continue
                if cleaner.install(log_, cleaning, result):
                    cleaned += 1
                    self.cleanings += 1
                    log.info(
                        "cleaned %s-%d: %d -> %d bytes, %d records removed",
                        partition.topic,
                        partition.index,
                        result.bytes_read,
                        result.bytes_written,
                        result.records_removed,
                    )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cleaning %s-%d failed", partition.topic, partition.index)
        return cleaned

    def _still_serving(self, partition: Any) -> bool:
        topic = self._topics.get(partition.topic)
        return topic is not None and partition in topic.partitions

    def close(self) -> None:
        """Wait for a build under way and stop the worker."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
