"""`respot queue`: the team's queue as the control plane last planned it.

Each held job with its position (the order the queue's rules would admit them in, were there
room), what it waits for (its turn, a vCPU quota, a GPU limit, its named queue, the jobs its
`after:` names) and an estimate of its start (from the estimated runtimes of what runs; none
when those are unknown). Also the named queues and the GPUs each researcher has admitted.
Reads the job table (the queue ledger item and the live jobs); sends nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from respot.cli.context import (
    Connection,
    JsonOption,
    LocalOption,
    connect,
    console,
    fail,
    print_json,
    reports_errors,
)

if TYPE_CHECKING:
    from respot.aws.queueledger import LedgerState
    from respot.core.job import JobRecord


def queue_view(held: list[JobRecord], ledger: LedgerState, now: datetime) -> dict[str, Any]:
    """What `respot queue` shows, as data (the JSON output)."""
    from respot.queue.words import NOT_PLANNED

    rows = []
    for record in sorted(held, key=lambda r: (r.created_at, r.job_id)):
        said = ledger.waits.get(record.job_id) or {}
        rows.append(
            {
                "job_id": record.job_id,
                "owner": record.submission.submitted_by,
                "priority": record.spec.priority,
                "queue": record.spec.queue,
                "after": list(record.spec.after),
                "position": said.get("position"),
                "waits_for": said.get("kind"),
                "reason": said.get("reason") or NOT_PLANNED,
                "estimated_start": said.get("estimate"),
                "held_for_seconds": int((now - record.created_at).total_seconds()),
            }
        )
    rows.sort(key=lambda r: (r["position"] is None, r["position"] or 0, r["job_id"]))
    admitted: dict[str, int] = {}
    for lease in ledger.leases.values():
        admitted[lease.researcher] = admitted.get(lease.researcher, 0) + lease.gpus
    return {
        "held": rows,
        "admitted_gpus_by_researcher": admitted,
        # admitted jobs running on room reserved for a held job: taken back when it can start
        "on_loan": {
            job_id: lease.loan_for
            for job_id, lease in sorted(ledger.leases.items())
            if lease.loan_for is not None
        },
        "queues": ledger.queues or sorted(((ledger.settings or {}).get("queues") or {}).keys()),
        "planned_at": ledger.planned_at,
    }


def publish_settings(conn: Connection, settings: dict[str, Any]) -> None:
    """Sign and publish an admin's queue settings (checked first, field named)."""
    from respot.control.queuecommand import SETTINGS_PROOF_ID, QueueSettingsCommand
    from respot.identity.proofs import ProofError, digest_to_sign, sign_proof, sts_url
    from respot.wire.messages import encode

    command = QueueSettingsCommand(settings=settings, requested_at=datetime.now(UTC))
    deployment = conn.deployment
    credentials = conn.session.get_credentials()
    if credentials is None:
        raise ProofError(
            "no AWS credentials found to prove who you are; log in (e.g. `aws sso login`) "
            "or set AWS_PROFILE"
        )
    proof = sign_proof(
        credentials,
        region=deployment.region or conn.session.region_name or "us-east-1",
        url=sts_url(deployment.region, deployment.endpoint_url),
        job_id=SETTINGS_PROOF_ID,
        command=command.command,
        digest=digest_to_sign(command, deployment.proof_digest),
    )
    signed = command.model_copy(update={"proof": proof})
    conn.client("sns").publish(
        TopicArn=deployment.topic_arn,
        Message=encode(signed),
        MessageAttributes={"command": {"DataType": "String", "StringValue": command.command}},
    )


def _read_settings(text: str) -> dict[str, Any]:
    import json
    from pathlib import Path

    from respot.queue.settings import QueueSettingsError, parse_settings

    raw = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        data = json.loads(raw)
    except ValueError as exc:
        fail(f'--set-limits: not JSON ({exc}); e.g. \'{{"enabled": true, "researcher_gpus": 8}}\'')
    if not isinstance(data, dict):
        fail("--set-limits: give a JSON object")
    try:
        parse_settings(data)
    except QueueSettingsError as exc:
        fail(f"--set-limits: {exc}")
    return data


@reports_errors
def queue(
    set_limits: Annotated[
        str | None,
        typer.Option(
            "--set-limits",
            help="Admins: replace the queue's settings (JSON, or @file) without a deploy; "
            "docs/queue.md lists them.",
        ),
    ] = None,
    local: LocalOption = False,
    json_output: JsonOption = False,
) -> None:
    """The team's queue: each held job's position, what it waits for, when it may start."""
    from respot.aws.jobs import JobTable
    from respot.aws.queueledger import QueueLedger
    from respot.core.states import JobState
    from respot.queue.words import start_text

    conn = connect(local)
    if set_limits is not None:
        publish_settings(conn, _read_settings(set_limits))
        console().print(
            "sent: the control plane applies it if you are an admin (admin_principal_arns); "
            "`respot queue` shows its effect at the next admission pass"
        )
        return
    table = conn.deployment.table_name
    client = conn.client("dynamodb")
    jobs = JobTable(table, client)
    held = [r for r in (jobs.get(i) for i in jobs.live_job_ids()) if r and r.state is JobState.HELD]
    view = queue_view(held, QueueLedger(table, client).read(), datetime.now(UTC))
    if json_output:
        print_json(view)
        return
    out = console()
    if not view["held"]:
        out.print("no job is held: every live job is admitted (`respot ls --live` lists them)")
    else:
        from rich.table import Table

        t = Table(box=None, header_style="bold", pad_edge=False)
        for col in ("#", "job", "owner", "prio", "waits for", "estimated start"):
            t.add_column(col)
        for row in view["held"]:
            t.add_row(
                str(row["position"] or "-"),
                row["job_id"],
                (row["owner"] or "-").rsplit("/", 1)[-1],
                row["priority"],
                row["reason"],
                start_text(row["estimated_start"]),
            )
        out.print(t)
    if view["admitted_gpus_by_researcher"]:
        admitted = ", ".join(
            f"{r.rsplit('/', 1)[-1]}: {g}"
            for r, g in sorted(view["admitted_gpus_by_researcher"].items())
        )
        out.print(f"GPUs admitted now: {admitted}")
    for job_id, holder in view["on_loan"].items():
        out.print(
            f"on loan: {job_id} runs on room reserved for {holder}; it is checkpointed and "
            f"queued again when {holder} can start"
        )
    if view["queues"]:
        out.print(f"named queues: {', '.join(view['queues'])}")


def budget_view(ledger: LedgerState) -> list[dict[str, Any]]:
    """Each researcher and team with a budget or a spend this month, as the last pass saw."""
    rows = []
    for key in sorted(set(ledger.budgets) | set(ledger.spend)):
        kind, _, name = key.partition(":")
        spent = ledger.spend.get(key, 0.0)
        budget = ledger.budgets.get(key)
        rows.append(
            {
                "kind": kind,
                "name": name,
                "spent_usd": round(spent, 2),
                "budget_usd": budget,
                "percent": round(100 * spent / budget, 1) if budget else None,
                "held": budget is not None and spent >= budget,
            }
        )
    return rows


@reports_errors
def budget(local: LocalOption = False, json_output: JsonOption = False) -> None:
    """Monthly budgets: what each researcher and team spent this month (UTC) against theirs."""
    from respot.aws.queueledger import QueueLedger

    conn = connect(local)
    ledger = QueueLedger(conn.deployment.table_name, conn.client("dynamodb")).read()
    rows = budget_view(ledger)
    if json_output:
        print_json({"budgets": rows, "planned_at": ledger.planned_at})
        return
    out = console()
    if not rows:
        out.print(
            "no budgets set (stack setting queue: researcher_budget(s), team_budgets; "
            "`respot queue --set-limits`)"
        )
        return
    from rich.table import Table

    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("who", "spent", "budget", "%", ""):
        t.add_column(col)
    for row in rows:
        t.add_row(
            f"{row['kind']} {row['name'].rsplit('/', 1)[-1]}",
            f"${row['spent_usd']:.2f}",
            "-" if row["budget_usd"] is None else f"${row['budget_usd']:.2f}",
            "-" if row["percent"] is None else f"{row['percent']:.0f}%",
            "new jobs held" if row["held"] else "",
        )
    out.print(t)
    out.print(f"as of the last admission pass ({ledger.planned_at or 'none yet'})")
