"""A job's outputs in S3: the files of `output_dir` under `outputs/`, then their manifest.

The agent uploads every regular file the session left in `output_dir` to
`jobs/<job>/outputs/<relative path>` (each with its SHA-256 in the object's metadata), and
then, last, `jobs/<job>/outputs.json`: path, size and SHA-256 of every file, the attempt and
how it ended. `respot pull` checks each file it downloads against that manifest. A job that
failed uploads what its `output_dir` holds too (the manifest says `"outcome": "failed"`): a
failed notebook's executed copy, with the error in it, is what its author wants to see.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from respot.storage import layout
from respot.storage.checkpoints import ManifestFile, default_transfer_config, file_sha256

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger(__name__)

OUTPUTS_SCHEMA_VERSION: Literal[1] = 1
SHA256_METADATA = "sha256"  # x-amz-meta-sha256 on every output object


class OutputsManifest(BaseModel):
    """What one attempt uploaded as the job's outputs."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = OUTPUTS_SCHEMA_VERSION
    job_id: str
    attempt: int = Field(ge=0)
    outcome: Literal["completed", "failed"]
    created_at: datetime
    files: list[ManifestFile]

    @property
    def size_bytes(self) -> int:
        """Total size of the outputs."""
        return sum(f.size for f in self.files)

    def body(self) -> bytes:
        """The bytes `outputs.json` holds (the agent reports their SHA-256 to the control plane)."""
        return self.model_dump_json(indent=1).encode()

    @property
    def sha256(self) -> str:
        """SHA-256 of `body()`: what the job record keeps and `respot pull` checks."""
        return hashlib.sha256(self.body()).hexdigest()


def upload_outputs(
    s3: S3Client,
    local_dir: Path,
    *,
    bucket: str,
    job_id: str,
    attempt: int,
    outcome: Literal["completed", "failed"],
) -> OutputsManifest:
    """Upload every regular file under `local_dir` (links skipped), then the manifest."""
    from boto3.s3.transfer import create_transfer_manager

    prefix = layout.outputs_prefix(job_id)
    files: list[tuple[Path, ManifestFile]] = []
    if local_dir.is_dir():
        for path in sorted(local_dir.rglob("*")):
            if path.is_symlink():
                logger.warning("outputs: skipping symbolic link %s", path)
                continue
            if not path.is_file():
                continue
            rel = path.relative_to(local_dir).as_posix()
            entry = ManifestFile(path=rel, size=path.stat().st_size, sha256=file_sha256(path))
            files.append((path, entry))
    with create_transfer_manager(s3, default_transfer_config()) as manager:
        futures = [
            manager.upload(
                str(path),
                bucket,
                prefix + entry.path,
                extra_args={"Metadata": {SHA256_METADATA: entry.sha256}},
            )
            for path, entry in files
        ]
        for future in futures:
            future.result()
    manifest = OutputsManifest(
        job_id=job_id,
        attempt=attempt,
        outcome=outcome,
        created_at=datetime.now(UTC),
        files=[entry for _, entry in files],
    )
    # Written last: a manifest names only files that are in S3.
    s3.put_object(
        Bucket=bucket,
        Key=layout.outputs_manifest_key(job_id),
        Body=manifest.body(),
        ContentType="application/json",
    )
    return manifest
