"""The tether table: on demand, point-in-time recovery, TTL, the active-jobs and all-jobs indexes.

Keys and indexes come from `functions.adapters.table.TABLE_DEFINITION`, the same definition the
tests and the local stack create the table from.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from functions.adapters.table import TABLE_DEFINITION, TTL_ATTRIBUTE

_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}


def _attribute(definition: dict[str, Any], key_schema: list[dict[str, str]], kind: str) -> Any:
    types = {a["AttributeName"]: a["AttributeType"] for a in definition["AttributeDefinitions"]}
    for key in key_schema:
        if key["KeyType"] == kind:
            name = key["AttributeName"]
            return dynamodb.Attribute(name=name, type=_TYPES[types[name]])
    return None


class DataStore(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        definition = TABLE_DEFINITION
        assert definition["BillingMode"] == "PAY_PER_REQUEST"
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=_attribute(definition, definition["KeySchema"], "HASH"),
            sort_key=_attribute(definition, definition["KeySchema"], "RANGE"),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=TTL_ATTRIBUTE,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            # Job history outlives the stack; README "Teardown" says how to delete it.
            removal_policy=RemovalPolicy.RETAIN,
        )
        for index in definition["GlobalSecondaryIndexes"]:
            assert index["Projection"]["ProjectionType"] == "ALL"
            self.table.add_global_secondary_index(
                index_name=index["IndexName"],
                partition_key=_attribute(definition, index["KeySchema"], "HASH"),
                sort_key=_attribute(definition, index["KeySchema"], "RANGE"),
                projection_type=dynamodb.ProjectionType.ALL,
            )
