"""What other instances' EC2 state changes cost respot, per 1,000 (the idle figure's caveat).

    .venv/bin/python -m bench.foreign_events [--billed-ms 100] [--json]

respot's `instance-state` rule (infra/wiring.py) matches every `EC2 Instance State-change
Notification` of the account and region in the states it acts on (running, stopping,
stopped, shutting-down, terminated): EventBridge patterns match the event's content only, and
EC2's state-change event carries the instance id and state, no tags ("Amazon EC2 state
change events", EC2 User Guide), so the rule cannot be narrowed to respot's instances. Each
match invokes `instance_state`, which reads the instance's owner in the job table (one
eventually consistent GetItem) and stops there for an instance that is not respot's
(`respot.control.service`, `instance_event`). A satellite region's forwarding rule has the
same pattern and puts each match on the home region's bus: a cross-region event, $1.00 per
million (EventBridge pricing), then the same invocation at home.

Priced per 1,000 such events, us-east-1 list prices (bench/prices.py, each with its page):
Lambda request, duration (arm64, the function's memory from WIRING, `--billed-ms` per
invocation: an assumption, not a measurement; a warm miss is one DynamoDB read, and the
default 100 ms is several times that), the DynamoDB read (0.5 RRU), ~400 bytes of logs
(START/END/REPORT plus the "not a respot instance" line), and the forward from a satellite.
Cold starts are left out (a steady stream of events keeps the function warm).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

from bench.prices import PRICES, usd
from infra.wiring import WIRING

EVENTS = 1000
LOG_BYTES_PER_INVOCATION = 400
READ_UNITS_PER_MISS = 0.5  # one eventually consistent GetItem of a small item


@dataclass(frozen=True)
class ForeignEventCost:
    """Dollars per 1,000 state changes of instances that are not respot's."""

    lambda_requests: float
    lambda_duration: float
    dynamodb_read: float
    logs: float
    home_total: float  # an instance in the home region
    forward: float
    satellite_total: float  # an instance in a satellite region (forwarded, then handled)
    billed_ms: float
    memory_mb: int


def foreign_event_cost(billed_ms: float = 100.0) -> ForeignEventCost:
    """The cost of 1,000 foreign state-change events, at home and from a satellite."""
    memory_mb = next(f.memory_mb for f in WIRING.functions if f.name == "instance_state")
    requests = usd("lambda_request", EVENTS)
    duration = usd("lambda_gb_second_arm64", EVENTS * billed_ms / 1000 * memory_mb / 1024)
    read = usd("dynamodb_rru", EVENTS * READ_UNITS_PER_MISS)
    logs = usd("logs_ingest", EVENTS * LOG_BYTES_PER_INVOCATION / 1e9)
    home = requests + duration + read + logs
    forward = usd("eventbridge_cross_region", EVENTS)
    return ForeignEventCost(
        requests, duration, read, logs, home, forward, home + forward, billed_ms, memory_mb
    )


def report(cost: ForeignEventCost) -> str:
    """Markdown: the components and the two totals, with the price sources."""
    rows = [
        ("Lambda requests", cost.lambda_requests, PRICES["lambda_request"].source),
        (
            f"Lambda duration ({cost.billed_ms:g} ms at {cost.memory_mb} MB, arm64)",
            cost.lambda_duration,
            PRICES["lambda_gb_second_arm64"].source,
        ),
        ("DynamoDB GetItem (0.5 RRU)", cost.dynamodb_read, PRICES["dynamodb_rru"].source),
        ("CloudWatch Logs (~400 B)", cost.logs, PRICES["logs_ingest"].source),
        ("home region, total", cost.home_total, ""),
        ("forward from a satellite", cost.forward, PRICES["eventbridge_cross_region"].source),
        ("satellite region, total", cost.satellite_total, ""),
    ]
    lines = ["| per 1,000 foreign state changes | USD | price |", "|---|---|---|"]
    lines += [f"| {name} | {value:.6f} | {source} |" for name, value, source in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--billed-ms", type=float, default=100.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cost = foreign_event_cost(args.billed_ms)
    print(json.dumps(asdict(cost), indent=2) if args.json else report(cost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
