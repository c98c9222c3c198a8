"""Local AWS: moto in place of DynamoDB, Step Functions, Lambda, SNS, Secrets Manager, SSM
Parameter Store and S3, with the CDK-synthesized template deployed on it in this process.

Modules: `local_aws` (`LocalAws`: moto's server on loopback, the template deployed, the moto
patches applied while it is open), `template` (CloudFormation intrinsics resolved, pure),
`deployer` (the template's resources created with boto3), `deployed` (what a deploy made: names,
ARNs, outputs, schedules, HTTP routes), `moto_patches` (the moto internals patched: Lambda
invocations, scaled Wait and Retry clocks, execution timeouts), `lambda_runtime`,
`lambda_process` and `lambda_worker` (Lambda's execution environments: in process or one OS
process each), `apigw` (API Gateway HTTP API payload-2.0 events).
"""
