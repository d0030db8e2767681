"""The account doctor: is this account and region ready for `cdk deploy` and for jobs?

`run_checks(target, client_factory)` runs each check of `checks` with injected boto3 clients
and returns `Finding`s (ok / warn / blocker / skipped, each blocker and warning with its
fix). `respot doctor` prints them; see docs/deploy.md.
"""

from respot.doctor.exceptions import DoctorError
from respot.doctor.findings import Finding, Status
from respot.doctor.run import ClientFactory, blocks, run_checks
from respot.doctor.target import Target

__all__ = ["ClientFactory", "DoctorError", "Finding", "Status", "Target", "blocks", "run_checks"]
