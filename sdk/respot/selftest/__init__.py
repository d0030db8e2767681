"""The deployment self-test: run the smallest job, interrupt it with AWS FIS, see it resume.

`Selftest(deployment, session).run()` returns a `SelftestResult` (passed, why, the changeover
figures). `respot selftest` prints it. The FIS experiment template is `experiment`'s, created
by the stack (and by the local runtime in its emulator).
"""

from respot.selftest.exceptions import SelftestError, SelftestStoppedError
from respot.selftest.run import (
    Changeover,
    Selftest,
    SelftestPlan,
    SelftestResult,
    SelftestTimeouts,
    changeover_of,
    measure,
)

__all__ = [
    "Changeover",
    "Selftest",
    "SelftestError",
    "SelftestPlan",
    "SelftestResult",
    "SelftestStoppedError",
    "SelftestTimeouts",
    "changeover_of",
    "measure",
]
