"""The :class:`~onceflow.broker.replica.config.BrokerView` a broker's partitions read: its current
metadata image."""

from __future__ import annotations

from collections.abc import Callable

from onceflow.metadata.image import MetadataImage


class ImageBrokerView:
    def __init__(self, image: Callable[[], MetadataImage]) -> None:
        self._image = image

    def broker_epoch(self, broker_id: int) -> int | None:
        broker = self._image().broker(broker_id)
        return None if broker is None else broker.epoch

    def isr_eligible(self, broker_id: int) -> bool:
        return self._image().is_active(broker_id)
