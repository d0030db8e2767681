"""Where a job's things live in S3 and how they are written: layout, checkpoints, outputs.

`layout` (one function per kind of object, one prefix per job; the IAM grants are built
from it), `checkpoints` (content-addressed blobs, manifest last) and `outputs`.
"""
