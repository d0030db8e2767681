"""Several spot pools at once: placements, what a multi-pool policy observes, and the simulator.

The rules are those of `bench/specs/multi-zone.md` on top of `bench/specs/spot-policy.md`:
each pool k (a trace file: a zone, or a zone and instance type) has its own availability
a_k; its region is the zone name without its last letter. A policy holds nothing, on-demand
(which runs in `home`, the region of the newest checkpoint) or the spot of one pool. Taking
the spot of a pool in another region moves the checkpoint there: S * q dollars, once, and
`home` follows. Everything else (integer seconds, changeovers, preemption at the tick
boundary, finish and miss) is as in the single-zone rules.

Pure Python like `respot.policy.model`: the live control plane may import it in a Lambda.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from respot.policy.exceptions import TraceError
from respot.policy.model import Choice, HistoryView, Job, Trace, load_trace, on_demand_cost
from respot.policy.model import tick_price as single_tick_price

# The benchmark's checkpoint size and transfer price (multi-zone.md): S = 10 GB, q = $0.02/GB.
CHECKPOINT_GB = 10.0
TRANSFER_PRICE_PER_GB = 0.02


def region_of(zone: str) -> str:
    """The region of a zone or pool name: the zone without its last letter.

    `us-east-1c` -> `us-east-1`, `us-central1-a` -> `us-central1`; a pool named after a zone
    and an instance type (`us-west-2a_v100_1`, the trace files' names) uses its zone part.
    """
    zone = zone.split("_", 1)[0]
    if len(zone) < 2 or not zone[-1].isalpha():
        raise TraceError(f"{zone!r}: a pool name must start with a zone name such as us-east-1c")
    region = zone[:-1]
    return region[:-1] if region.endswith("-") else region


@dataclass(frozen=True, slots=True)
class Placement:
    """What to hold during one tick: nothing, on-demand (in `home`), or the spot of pool `pool`."""

    choice: Choice
    pool: int | None = None  # index of the pool when choice is SPOT, else None

    def __post_init__(self) -> None:
        if (self.choice is Choice.SPOT) != (self.pool is not None):
            raise ValueError("a spot placement names its pool, and only a spot placement does")

    @classmethod
    def spot(cls, pool: int) -> Placement:
        """The spot of pool `pool`."""
        return cls(Choice.SPOT, pool)

    def __str__(self) -> str:
        return f"spot[{self.pool}]" if self.choice is Choice.SPOT else self.choice.value


NOTHING = Placement(Choice.NONE)
ON_DEMAND = Placement(Choice.ON_DEMAND)


@dataclass(frozen=True, slots=True)
class Pool:
    """One spot pool: its name (zone, or zone and instance type) and its region."""

    name: str
    region: str

    @classmethod
    def named(cls, name: str) -> Pool:
        """A pool whose region is derived from its name (`region_of`)."""
        return cls(name=name, region=region_of(name))


@dataclass(frozen=True, slots=True)
class PoolsObservation:
    """Everything a multi-pool policy may see at the start of tick `tick`.

    The job (C, D, d, G, w, r) as in `Observation`; `held` is what was held during the
    previous tick (NOTHING after a preemption), `home` the region of the newest checkpoint,
    and for every pool its region, whether its spot can be had now (`available[k]` = a_k[i])
    and its past (`histories[k]` = a_k[0..i-1], 0/1). Live, a history is what respot observed
    of the pool: launches that succeeded and runs that lasted (1), capacity errors and
    interruptions (0); a tick nothing observed repeats the last observation.

    `observed[k]`: whether `available[k]` was seen at this tick (None: every pool was, as in
    the benchmark). Live, a pool nobody asked this tick counts as available (asking is free
    and is how to find out), but the age of its current run is then unknown.
    """

    tick: int
    gap_seconds: int
    work_seconds: int
    deadline_seconds: int
    changeover_seconds: int
    done_seconds: int
    remaining_changeover_seconds: int
    held: Placement
    home: str
    pools: tuple[Pool, ...]
    available: tuple[bool, ...]
    histories: tuple[Sequence[int], ...]
    checkpoint_gb: float = CHECKPOINT_GB
    transfer_price_per_gb: float = TRANSFER_PRICE_PER_GB
    observed: tuple[bool, ...] | None = None

    def seen_now(self, pool: int) -> bool:
        """Whether pool `pool`'s availability at this tick was observed (not assumed)."""
        return self.observed is None or self.observed[pool]

    @property
    def ticks_left(self) -> int:
        """Ticks that can still make progress, this one included."""
        return self.deadline_seconds // self.gap_seconds - self.tick

    @property
    def remaining_seconds(self) -> int:
        """Work still to do."""
        return max(self.work_seconds - self.done_seconds, 0)

    @property
    def slack_seconds(self) -> int:
        """Tick-aligned time left minus work left."""
        return self.ticks_left * self.gap_seconds - self.remaining_seconds

    def transfer_fee(self, pool: int) -> float:
        """Dollars to move the checkpoint to pool `pool`'s region (0 if it is already there)."""
        if self.pools[pool].region == self.home:
            return 0.0
        return self.checkpoint_gb * self.transfer_price_per_gb


@runtime_checkable
class PoolsPolicy(Protocol):
    """Chooses a placement for one tick from a `PoolsObservation`."""

    name: str

    def place(self, obs: PoolsObservation) -> Placement:
        """The placement for tick `obs.tick`."""
        ...


@dataclass(frozen=True, slots=True)
class PoolSet:
    """A set of pools with aligned traces: same tick length, cut to the shortest file."""

    pools: tuple[Pool, ...]
    gap_seconds: int
    availability: tuple[tuple[int, ...], ...]  # availability[k][t], 0/1
    source: str = field(default="", compare=False)

    def __len__(self) -> int:
        return len(self.availability[0])

    @property
    def regions(self) -> tuple[str, ...]:
        """The regions of the set, in order of first appearance."""
        return tuple(dict.fromkeys(pool.region for pool in self.pools))

    @classmethod
    def from_traces(cls, traces: Sequence[Trace], source: str = "") -> PoolSet:
        """Pools ordered as given (callers sort by file name), cut to the shortest trace."""
        if not traces:
            raise TraceError(f"{source or 'pool set'}: no trace files (*.json)")
        gaps = {trace.gap_seconds for trace in traces}
        if len(gaps) != 1:
            listed = ", ".join(f"{t.name}: {t.gap_seconds} s" for t in traces)
            raise TraceError(f"traces of one set must share gap_seconds ({listed})")
        length = min(len(trace) for trace in traces)
        pools = []
        for trace in traces:
            try:
                pools.append(Pool.named(trace.name))
            except TraceError as exc:
                raise TraceError(f"{trace.name}: {exc}") from None
        return cls(
            pools=tuple(pools),
            gap_seconds=traces[0].gap_seconds,
            availability=tuple(trace.availability[:length] for trace in traces),
            source=source,
        )

    def window_starts(self, window_ticks: int, windows: int) -> list[int]:
        """Start ticks of the windows: floor(k * (L - W) / N), the same in every pool."""
        spare = len(self) - window_ticks
        if spare < 0:
            raise TraceError(
                f"{self.source or 'pool set'}: {len(self)} ticks (the shortest trace) is "
                f"shorter than a window of {window_ticks} ticks"
            )
        return [k * spare // windows for k in range(windows)]

    def window(self, start: int, window_ticks: int) -> tuple[tuple[int, ...], ...]:
        """Every pool's `window_ticks` entries from `start`."""
        return tuple(a[start : start + window_ticks] for a in self.availability)


def load_pool_set(paths: Sequence[Path]) -> PoolSet:
    """A set from a directory or from trace files; pools in file-name order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
            if not found:
                raise TraceError(f"{path}: no trace files (*.json)")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise TraceError(f"{path}: no such file or directory")
    files.sort(key=lambda p: p.name)
    names = [p.stem for p in files]
    if len(set(names)) != len(names):
        raise TraceError(f"two trace files share a name: {', '.join(names)}")
    source = ", ".join(str(p) for p in paths)
    return PoolSet.from_traces([load_trace(p) for p in files], source=source)


@dataclass(frozen=True, slots=True)
class PoolsOutcome:
    """What one policy run on one multi-pool window cost and whether it finished in time."""

    cost: float  # dollars, transfers included
    normalized_cost: float
    missed: bool
    finish_seconds: int | None
    spot_ticks: int
    on_demand_ticks: int
    changeovers: int
    transfers: int
    placements: tuple[Placement, ...]  # effective placement per tick


def simulate_pools(
    policy: PoolsPolicy,
    pools: Sequence[Pool],
    window: Sequence[Sequence[int]],
    job: Job,
    gap_seconds: int,
    *,
    checkpoint_gb: float = CHECKPOINT_GB,
    transfer_price_per_gb: float = TRANSFER_PRICE_PER_GB,
) -> PoolsOutcome:
    """Run `policy` on one window (window[k] = a_k[0..floor(D/G)]) under multi-zone.md."""
    ticks = job.ticks(gap_seconds)
    if len(window) != len(pools) or not pools:
        raise ValueError(f"{len(window)} availability rows for {len(pools)} pools")
    avail = tuple(tuple(1 if a else 0 for a in row[: ticks + 1]) for row in window)
    if any(len(row) < ticks + 1 for row in avail):
        raise ValueError(f"a window row is shorter than the {ticks + 1} ticks the rules need")
    pools = tuple(pools)
    work, changeover = job.work_seconds, job.changeover_seconds
    fee = checkpoint_gb * transfer_price_per_gb
    held, home = NOTHING, pools[0].region
    remaining_changeover = done = 0
    spot_ticks = on_demand_ticks = changeovers = transfers = 0
    finish: int | None = None
    placements: list[Placement] = []
    for tick in range(ticks):
        if done >= work:
            break
        obs = PoolsObservation(
            tick=tick,
            gap_seconds=gap_seconds,
            work_seconds=work,
            deadline_seconds=job.deadline_seconds,
            changeover_seconds=changeover,
            done_seconds=done,
            remaining_changeover_seconds=remaining_changeover,
            held=held,
            home=home,
            pools=pools,
            available=tuple(row[tick] == 1 for row in avail),
            histories=tuple(HistoryView(row, tick) for row in avail),
            checkpoint_gb=checkpoint_gb,
            transfer_price_per_gb=transfer_price_per_gb,
        )
        # 1. Choose; the spot of a pool that has none counts as nothing.
        x = policy.place(obs)
        if x.choice is Choice.SPOT:
            if x.pool is None or not 0 <= x.pool < len(pools):
                raise ValueError(f"{policy.name}: placement {x} names no pool of the set")
            if not avail[x.pool][tick]:
                x = NOTHING
        placements.append(x)
        # 2. Hold nothing, or (re)start, move the checkpoint if needed, bill and progress.
        # A policy may say it restarted what it held (`restarted`: `LiveView`'s return from
        # on-demand that every pool refused stopped the on-demand instance): a changeover.
        if x.choice is Choice.NONE:
            held, remaining_changeover = NOTHING, 0
        else:
            if x != held or getattr(policy, "restarted", False):
                remaining_changeover = changeover
                changeovers += 1
                if x.pool is not None and pools[x.pool].region != home:
                    transfers += 1
                    home = pools[x.pool].region
            if x.choice is Choice.SPOT:
                spot_ticks += 1
            else:
                on_demand_ticks += 1
            done = min(work, done + max(gap_seconds - remaining_changeover, 0))
            remaining_changeover = max(remaining_changeover - gap_seconds, 0)
            held = x
        # 3. Preemption at the tick boundary.
        if held.pool is not None and not avail[held.pool][tick + 1]:
            held, remaining_changeover = NOTHING, 0
        # 4. Finished at (i + 1) * G once the work is done.
        if done >= work:
            finish = (tick + 1) * gap_seconds
    cost = (
        spot_ticks * single_tick_price(Choice.SPOT, gap_seconds)
        + on_demand_ticks * single_tick_price(Choice.ON_DEMAND, gap_seconds)
        + transfers * fee
    )
    return PoolsOutcome(
        cost=cost,
        normalized_cost=cost / on_demand_cost(job, gap_seconds),
        missed=done < work,
        finish_seconds=finish,
        spot_ticks=spot_ticks,
        on_demand_ticks=on_demand_ticks,
        changeovers=changeovers,
        transfers=transfers,
        placements=tuple(placements),
    )
