"""Publishes job transition events to the `JobEvents` SNS topic (`functions/domain/job_events`).

Called by the services after a transition has been stored, never inside the store's
transaction: an event is a courtesy to subscribers, so a publishing failure is logged and
counted (`JobEventsPublishFailed`) and the transition stands. Delivery is at most once per
transition (a function that dies between the write and the publish loses that event); the
job's timeline (`tether status`) is the record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3

from functions.domain.job_events import JobTransitionEvent
from functions.observability import MetricUnit, logger, metrics

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient
else:
    SNSClient = Any

PUBLISH_FAILED_METRIC = "JobEventsPublishFailed"


class JobEvents:
    """`topic_arn=None`: publishing is switched off (a function the stack gives no topic).
    The client is built on first publish, so a function that transitions nothing never pays
    for it; `client=None` builds a default one."""

    def __init__(self, topic_arn: str | None, client: SNSClient | None = None) -> None:
        self.topic_arn = topic_arn
        self._client = client

    def publish(self, event: JobTransitionEvent) -> bool:
        """True when SNS accepted the event; False when off or when publishing failed."""
        if not self.topic_arn:
            return False
        try:
            if self._client is None:
                self._client = boto3.client("sns")
            self._client.publish(
                TopicArn=self.topic_arn,
                Message=event.message(),
                MessageAttributes={
                    name: {"DataType": "String", "StringValue": value}
                    for name, value in event.attributes().items()
                },
            )
        except Exception:  # any failure (throttling, KMS, network) must leave the transition be
            logger.exception(
                "job event not published",
                extra={"job_id": event.job_id, "to": event.to.value, "topic": self.topic_arn},
            )
            metrics.add_metric(name=PUBLISH_FAILED_METRIC, unit=MetricUnit.Count, value=1)
            return False
        return True
