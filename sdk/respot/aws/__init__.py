"""Adapters to AWS: each takes its boto3 client and turns the core's effects into calls.

`capacity` (launch and terminate instances), `jobs` (the job table, compare-and-set),
`pools` (pool histories), `satellites` (other regions) and `ec2events` (EventBridge and SNS
shapes parsed into the core's events).
"""
