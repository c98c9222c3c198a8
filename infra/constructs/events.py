"""The `JobEvents` topic: one structured event per job transition
(`functions/domain/job_events.py`), for users to subscribe to (SQS, Lambda, HTTPS, e-mail) and
filter by the `state` and `job_id` message attributes.

A topic of its own rather than the lifecycle's `Notifications`: that one carries a few
human-readable messages to an e-mail address, this one every transition as JSON for programs.
Encrypted with the AWS-managed `aws/sns` key like `Notifications` (its key policy lets any
principal of the account use it through SNS, so publishers need only `sns:Publish`). Only the
functions that move jobs (the jobs API's submit and cancel, the lifecycle steps) may publish.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra import names
from infra.constructs.function import TetherFunction


class JobEvents(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, publishers: Iterable[TetherFunction]
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="tether job transitions",
            enforce_ssl=True,
            master_key=kms.Alias.from_alias_name(self, "SnsKey", "alias/aws/sns"),
        )
        for publisher in publishers:
            self.topic.grant_publish(publisher.role)
            publisher.function.add_environment(names.JOB_EVENTS_TOPIC_ARN_ENV, self.topic.topic_arn)
