"""The launch invariant the e2e tests check, as a pure function of what EC2 started and the record.

Every instance EC2 started for a job is one of its attempts, in launch order, and every
attempt's instance is one EC2 started. An attempt may have no instance at all: requested,
then the job ended (its previous attempt completed within its notice) before EC2 answered
the launch. Such an attempt must have ended; it launched nothing, so it is not a launch.
"""

from __future__ import annotations

from respot.core.job import JobRecord


def launch_mismatch(launched: list[str], record: JobRecord) -> str | None:
    """Why `launched` (the job's instances, in launch order) does not match the record's
    attempts, or None if it does. Says which instance or attempt is the problem."""
    recorded = [a.instance_id for a in record.attempts if a.instance_id is not None]
    if launched != recorded:
        orphans = [i for i in launched if i not in recorded]
        unknown = [i for i in recorded if i not in launched]
        return (
            f"EC2 started {launched}, the attempts record {recorded}: no attempt records "
            f"{orphans}; EC2 never started {unknown}"
            + ("" if orphans or unknown else "; the order differs")
        )
    open_without = [a.number for a in record.attempts if a.instance_id is None and a.end is None]
    if open_without:
        return f"attempts {open_without} have no instance and have not ended"
    return None
