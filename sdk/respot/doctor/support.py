"""The doctor's checks of what AWS supports: the FIS service-linked role and the AMI's framework.

- `respot selftest` starts an AWS FIS experiment. FIS creates its service-linked role
  `AWSServiceRoleForFIS` on the first experiment of an account ("Start an experiment from a
  template" and "Use service-linked roles for AWS FIS", FIS User Guide), which needs
  `iam:CreateServiceLinkedRole` for `fis.amazonaws.com`: the stack's selftest policy grants
  it (infra/constructs/selftest.py), but an SCP may forbid it. The check says whether the
  role exists, and how to create it once.
- The AMI's framework version: AWS patches a DLAMI's framework only until its end of patch
  ("DLAMI Support Policy", https://docs.aws.amazon.com/dlami/latest/devguide/support-policy.html;
  the dates below are those of its framework support table,
  https://docs.aws.amazon.com/dlami/latest/devguide/dlami-support-policy-table.html, and of
  the Deep Learning Containers' table for the same PyTorch versions,
  https://aws.github.io/deep-learning-containers/reference/support_policy, checked
  2026-11-26). An image whose name gives a version past its date is warned about; a version
  the table does not know is said so, not guessed.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from respot.doctor.checks import check_service_linked_role
from respot.doctor.findings import Finding, ok, warn

FIS_SERVICE_LINKED_ROLE = "AWSServiceRoleForFIS"
FIS_ROLE_CHECK = "FIS service-linked role"
AMI_SUPPORT_CHECK = "AMI support"

# PyTorch DLAMI framework versions -> end of patch (the sources above). Keep in step with
# DEFAULT_AMI_PARAMETER (infra/settings.py): a test holds the default to a supported version.
PYTORCH_END_OF_PATCH: dict[str, dt.date] = {
    "2.6": dt.date(2026, 1, 29),
    "2.7": dt.date(2026, 4, 23),
    "2.8": dt.date(2026, 8, 6),
    "2.9": dt.date(2026, 10, 15),
    "2.10": dt.date(2027, 1, 21),
}
# PyTorch 2.11 DLAMIs are published (x86_64 Ubuntu 24.04 release notes from 2026-05) but
# were in neither table when read: no date is guessed for them (see check_ami_support).
SOON = dt.timedelta(days=60)
_PYTORCH = re.compile(r"pytorch[ -](\d+\.\d+)", re.IGNORECASE)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def check_fis_role(iam: Any) -> Finding:
    """AWSServiceRoleForFIS, which FIS creates on an account's first experiment."""
    return check_service_linked_role(
        iam,
        FIS_ROLE_CHECK,
        FIS_SERVICE_LINKED_ROLE,
        "fis.amazonaws.com",
        "`respot selftest`'s first FIS experiment creates it (the stack's selftest policy "
        "allows iam:CreateServiceLinkedRole)",
    )


def pytorch_version(image_name: str) -> str | None:
    """The PyTorch version a DLAMI's name or SSM parameter carries ("... PyTorch 2.9 ...")."""
    found = _PYTORCH.search(image_name)
    return found.group(1) if found else None


def check_ami_support(image_name: str, *, today: dt.date) -> Finding:
    """Warn when the AMI's PyTorch is past (or within 60 days of) AWS's end of patch."""
    version = pytorch_version(image_name)
    if version is None:
        return ok(
            AMI_SUPPORT_CHECK,
            f"{image_name!r} names no PyTorch version; check its support yourself",
        )
    end = PYTORCH_END_OF_PATCH.get(version)
    fix = (
        "set ami_parameter to a supported PyTorch DLAMI, e.g. "
        "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-<version>-ubuntu-"
        "24.04/latest/ami-id (the DLAMI support policy table lists the versions)"
    )
    if end is None:
        newest = max(PYTORCH_END_OF_PATCH, key=_version_key)
        if _version_key(version) > _version_key(newest):
            return ok(
                AMI_SUPPORT_CHECK,
                f"PyTorch {version} is newer than respot's table of end-of-patch dates (newest "
                f"{newest}, patched until {PYTORCH_END_OF_PATCH[newest].isoformat()}); its own "
                "date is in the DLAMI support policy table",
            )
        return warn(
            AMI_SUPPORT_CHECK,
            f"PyTorch {version} is older than every version in respot's table of end-of-patch "
            "dates: most likely out of patch",
            fix,
        )
    if today > end:
        return warn(
            AMI_SUPPORT_CHECK,
            f"PyTorch {version} DLAMIs are out of patch since {end.isoformat()}: no more "
            "security fixes",
            fix,
        )
    if end - today <= SOON:
        return warn(
            AMI_SUPPORT_CHECK, f"PyTorch {version} DLAMIs leave patch on {end.isoformat()}", fix
        )
    return ok(AMI_SUPPORT_CHECK, f"PyTorch {version} is patched until {end.isoformat()}")


def check_configured_ami(
    ec2: Any, *, ami_id: str | None, ami_parameter: str | None, today: dt.date
) -> Finding:
    """`check_ami_support` for the configured AMI: the DLAMI parameter's name carries the
    framework version; a fixed `ami_id` is read by its image name."""
    if ami_id:
        images = ec2.describe_images(ImageIds=[ami_id]).get("Images", [])
        if not images:
            return ok(AMI_SUPPORT_CHECK, f"{ami_id}: not found (the AMI check says why)")
        return check_ami_support(str(images[0].get("Name", ami_id)), today=today)
    if not ami_parameter:
        return ok(AMI_SUPPORT_CHECK, "no AMI configured (the AMI check says why)")
    return check_ami_support(ami_parameter, today=today)
