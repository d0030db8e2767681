"""Sessions that need what their job environment provides (tests/e2e/test_environments_e2e.py)."""

from __future__ import annotations

import json
import os
import sys

from e2esessions.counting import CountingSession


class NeedsPackageSession(CountingSession):
    """Counts like CountingSession, after importing a package only the job's requirements add."""

    def train(self) -> None:
        import respot_tinypkg  # type: ignore[import-not-found]  # from the job's requirements

        where = {
            "value": respot_tinypkg.VALUE,
            "package": respot_tinypkg.__file__,
            "python": sys.executable,
            "rank": os.environ.get("RANK"),
        }
        print("TINYPKG", json.dumps(where), flush=True)
        super().train()
        if self.output_dir.exists():
            (self.output_dir / "tinypkg.json").write_text(json.dumps(where))
