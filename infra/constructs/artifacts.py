"""The artifacts bucket: holds the agent wheel that rented hosts install (via presigned URLs).

Public access blocked, TLS only, S3-managed encryption. The wheel is uploaded at deploy by a
BucketDeployment. The bucket holds only build output, so it is emptied and deleted with the
stack.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CfnResource, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from infra import names
from infra.constructs.nag import acknowledge


class Artifacts(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, agent_wheel_dir: Path) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.DESTROY,
            auto_delete_objects=True,
        )
        acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "Holds only the agent wheel, rebuilt and uploaded by every deploy; reads are "
            "presigned URLs minted by the control plane. Access logs would need a second "
            "bucket for no security gain.",
        )
        self.agent_wheel = s3deploy.BucketDeployment(
            self,
            "AgentWheel",
            sources=[s3deploy.Source.asset(str(agent_wheel_dir))],
            destination_bucket=self.bucket,
            destination_key_prefix=names.AGENT_WHEEL_PREFIX,
            memory_limit=256,
            # CDK's helpers run only at deploy, but their default log groups never expire.
            log_group=self._helper_logs("AgentWheelLogs"),
        )
        self._suppress_cdk_helpers(Stack.of(self))
        self._auto_delete_logs(Stack.of(self))

    def _helper_logs(self, construct_id: str) -> logs.LogGroup:
        return logs.LogGroup(
            self,
            construct_id,
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _auto_delete_logs(self, stack: Stack) -> None:
        """The bucket's auto-delete helper (a CDK custom resource provider, no log group
        option): pointed at a log group with retention (its role may write any log group)."""
        provider = stack.node.try_find_child("Custom::S3AutoDeleteObjectsCustomResourceProvider")
        handler = provider.node.try_find_child("Handler") if provider is not None else None
        if isinstance(handler, CfnResource):
            group = self._helper_logs("AutoDeleteLogs")
            handler.add_property_override("LoggingConfig", {"LogGroup": group.log_group_name})

    def _suppress_cdk_helpers(self, stack: Stack) -> None:
        """The helper function CDK itself adds to upload the wheel at deploy."""
        reason = (
            "CDK-provided BucketDeployment helper: its managed execution policy and S3 "
            "wildcards are set by aws-cdk-lib; it runs only during deploy, reading the CDK "
            "asset bucket and writing this stack's artifacts bucket."
        )
        bucket_arn = stack.resolve(stack.get_logical_id(self.bucket.node.default_child))  # type: ignore[arg-type]
        findings = {
            "AwsSolutions-IAM4": [
                "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaBasicExecutionRole"
            ],
            "AwsSolutions-IAM5": [
                "Action::s3:GetObject*",
                "Action::s3:GetBucket*",
                "Action::s3:List*",
                "Action::s3:DeleteObject*",
                "Action::s3:Abort*",
                "Resource::arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-<AWS::AccountId>-"
                "<AWS::Region>/*",
                f"Resource::<{bucket_arn}.Arn>/*",
            ],
        }
        for child in stack.node.children:
            if child.node.id.startswith("Custom::CDKBucketDeployment"):
                for rule, ids in findings.items():
                    acknowledge(child, rule, reason, *ids)
                acknowledge(child, "AwsSolutions-L1", reason)
