"""Carry one job's newest checkpoint into another job's prefix (`restore_from:`).

The control plane calls it when it accepts a submission that names `restore_from` (after it
checked that both jobs have the same verified owner), before the first launch: S3 copies each
blob of the source's newest readable manifest (server-side, no bytes through the Lambda), then
writes a manifest under the new job (attempt 0, the same step) last, as an upload does. The
new job's agent restores it as its own checkpoint: the job's credentials never read another
job's prefix. Idempotent: a submission delivered twice copies the same objects again.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from respot.storage import layout
from respot.storage.checkpoints import CheckpointStore, Manifest

logger = logging.getLogger(__name__)


def carry_checkpoint(client: Any, bucket: str, source_job: str, target_job: str) -> Manifest | None:
    """Copy `source_job`'s newest checkpoint into `target_job`; None if it has none."""
    source = CheckpointStore(bucket=bucket, job_id=source_job, client=client).latest()
    if source is None:
        return None
    for digest in sorted({f.sha256 for f in source.files}):
        client.copy(
            {"Bucket": bucket, "Key": layout.blob_key(source_job, digest)},
            bucket,
            layout.blob_key(target_job, digest),
        )
    carried = Manifest(
        job_id=target_job,
        step=source.step,
        attempt=0,
        created_at=datetime.now(UTC),
        reason=f"carried from job {source_job} (step {source.step}, attempt {source.attempt})",
        files=source.files,
    )
    client.put_object(
        Bucket=bucket,
        Key=carried.key,
        Body=carried.model_dump_json().encode(),
        ContentType="application/json",
    )
    logger.info(
        "carried checkpoint step %d of %s into %s (%d files)",
        source.step,
        source_job,
        target_job,
        len(source.files),
    )
    return carried
