"""The pure heart of the control plane: given a job record and an event, decide what changes.

`decide(job, event, ...)` returns a `Decision`: the new record to write (compare-and-set on
its version), the effects to run once the write has succeeded, and an optional follow-up
event to apply right after (so that every committed state, INTERRUPTED included, is one a
reader can see). It never talks to AWS, never sleeps and never reads the clock itself.

Every event may be a duplicate or arrive out of order; the rules below make those harmless:
- an instance event is matched to its attempt by instance id, else by the attempt number
  its tags carry; events of other attempts only touch that attempt;
- a second instance for one attempt, or an instance of a finished job, is terminated;
- a capacity result whose client token is not the current attempt's is stale and ignored;
- progress only moves forward (the highest step wins).

Which module decides what (each imports only the ones listed below it):
- `dispatch`: `decide` and `_apply`, which hand each event to its family's module, and the
  hand-over of a return to spot that any event may complete;
- the event families, which import none of each other:
  - `launches`: `Submitted`, `PlaceNow`, `CapacityLaunched`, `CapacityUnavailable`,
    `LaunchRefused` (submission, placement across pools, quotas, EC2's refusals);
  - `instances`: `InstanceUp`, `InterruptionNotice`, `InstanceDown` (and stale EC2 events);
  - `reports`: `AgentReport`, one rule per kind (started, progress, checkpoint, preempted,
    completed, failed, boot failed), the progress notes and the timeline's progress history;
  - `ticks`: `ReconcileTick` (limits, silent instances, lost launches, the deadline
    policy's moves) and `CancelRequested`;
- `returns`: returns to spot (begun by the tick, refused by a capacity result, handed over
  by `dispatch`), shared by `launches`, `ticks` and `dispatch`;
- `attempts`: opening an attempt and its launch, interrupting one, a boot failure: the steps
  several families share;
- `draft`: `Decision`, the `_Draft` it is made on, `_finish` (a terminal state), the tags and
  `client_token`.
"""

from __future__ import annotations

from respot.core.lifecycle.dispatch import decide
from respot.core.lifecycle.draft import (
    ATTEMPT_TAG,
    HANDOFF_TAG,
    JOB_TAG,
    MANAGED_TAG,
    OWNER_TAG,
    SATELLITE_TAG,
    Decision,
    client_token,
)
from respot.core.lifecycle.instances import EVENT_CLOCK_SKEW, NOTICE_WINDOW
from respot.core.lifecycle.progress import (
    CHECKPOINT_NOTES_KEPT,
    PROGRESS_HISTORY_FRACTION,
    PROGRESS_HISTORY_METRICS,
    PROGRESS_HISTORY_SECONDS,
)
from respot.core.lifecycle.returns import return_hold

__all__ = [
    "ATTEMPT_TAG",
    "CHECKPOINT_NOTES_KEPT",
    "EVENT_CLOCK_SKEW",
    "HANDOFF_TAG",
    "JOB_TAG",
    "MANAGED_TAG",
    "NOTICE_WINDOW",
    "OWNER_TAG",
    "PROGRESS_HISTORY_FRACTION",
    "PROGRESS_HISTORY_METRICS",
    "PROGRESS_HISTORY_SECONDS",
    "SATELLITE_TAG",
    "Decision",
    "client_token",
    "decide",
    "return_hold",
]
