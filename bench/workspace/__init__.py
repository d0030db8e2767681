"""Workspace sync (issue 27): respot's checkpoint store against `aws s3 sync` and `s5cmd sync`.

    .venv/bin/python -m bench.workspace [--datasets small,big] [--files 1000] [--big-mib 2048]
        [--change-percent 1] [--repeats 3] [--json] [--no-write]

Two workspaces: 1,000 small files (1-20 KiB, the kinds a notebook workspace holds) and one
big file (2 GiB by default, `--big-mib` for a quick run; refused with the reason when this
machine has too little disk or memory for it). For each, every tool against one local S3
(infra.local's moto server on 127.0.0.1, in a process of its own): the first sync (upload),
a sync with nothing changed, a sync after `--change-percent` of the files (of the big file's
bytes) changed, and a restore onto an empty directory, checked file by file against the
workspace. Each figure is the median of `--repeats`; the tools' order alternates between
repeats. What the local S3 does and does not model: `runner.MODEL`, printed with the table.
Results: bench/results/<name>.json and .md (`--name`, default `workspace`).

`data` makes the workspaces, `tools` holds the three ways to sync, `s3server` runs moto in
its own process, `runner` runs and summarizes.
"""
