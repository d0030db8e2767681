"""The local runtime's modelled EC2 boot (infra/local/boot.py) is an option: the phases add up
to the timing it gives, and the default timing the tests run on stays the fast one."""

from __future__ import annotations

from infra.local.boot import Ec2BootModel, modelled_ec2_timing
from infra.local.fleet import FleetTiming
from infra.local.runtime import RuntimeOptions


def test_the_modelled_boot_is_its_phases():
    model = Ec2BootModel()
    phases = model.phases()
    timing = modelled_ec2_timing(model)
    assert timing.fulfil_seconds == phases["fulfil"] == 17.0
    rest = sum(v for k, v in phases.items() if k != "fulfil")
    assert abs(timing.boot_seconds - rest) < 0.01
    # the snapshot's lazy load and the package download scale with their inputs
    slower = Ec2BootModel(snapshot_mib_per_second=50.0)
    assert abs(slower.cold_import_seconds - 2 * model.cold_import_seconds) < 1e-9
    assert modelled_ec2_timing(slower).boot_seconds > timing.boot_seconds
    # longer than the fast boot, and the notice is EC2's two minutes either way
    assert timing.fulfil_seconds + timing.boot_seconds > 60.0
    assert timing.notice_seconds == FleetTiming().notice_seconds == 120


def test_the_tests_keep_the_fast_boot():
    assert RuntimeOptions().timing == FleetTiming()
    assert (FleetTiming().fulfil_seconds, FleetTiming().boot_seconds) == (15.0, 45.0)
