"""The checkpoint follows the job across regions, and the move is paid: what it cost.

respot's checkpoints live in the home region's bucket. An attempt that trains in another
region (a satellite region, `docs/deploy.md`) restores the newest checkpoint across regions
and its agent writes there from then on; the benchmark's fee for one such move
(`bench/specs/multi-zone.md`) is the checkpoint's size times $0.02/GB, once per move.

Recorded when the attempt's agent reports that it started from a checkpoint written in
another region (`note_restore`, called by the lifecycle), and priced in the cost ledger
(`respot.core.cost`). The size is the newest checkpoint's, from its agent's report.
"""

from __future__ import annotations

from respot.core.job import Attempt, JobRecord
from respot.policy.pools import TRANSFER_PRICE_PER_GB, region_of

GB = 1e9  # AWS prices data transfer per decimal gigabyte


def region_of_attempt(att: Attempt) -> str:
    """The region an attempt's instance runs in (its zone without the last letter)."""
    return region_of(att.placement.availability_zone)


def checkpoint_region(job: JobRecord, default: str) -> str:
    """The region whose bucket holds the job's newest checkpoint (`default`: none yet)."""
    ckpt = job.checkpoint
    source = job.attempt(ckpt.attempt) if ckpt is not None else None
    return region_of_attempt(source) if source is not None else default


def checkpoint_gb(job: JobRecord) -> float | None:
    """The newest checkpoint's size in GB as its agent reported it (None: none or unknown)."""
    ckpt = job.checkpoint
    if ckpt is None or not ckpt.size_bytes:
        return None
    return ckpt.size_bytes / GB


def note_restore(job: JobRecord, att: Attempt) -> None:
    """On `att`'s start: record the checkpoint's move if it was written in another region."""
    ckpt = job.checkpoint
    if ckpt is None or att.restored_step is None or ckpt.attempt == att.number:
        return
    source = job.attempt(ckpt.attempt)
    if source is None or region_of_attempt(source) == region_of_attempt(att):
        return
    att.transfer_bytes = ckpt.size_bytes or 0
    att.transfer_from = region_of_attempt(source)


def transfer_usd(att: Attempt) -> float:
    """Dollars paid to move the checkpoint into this attempt's region (0 if it did not move)."""
    if att.transfer_bytes is None:
        return 0.0
    return att.transfer_bytes / GB * TRANSFER_PRICE_PER_GB
