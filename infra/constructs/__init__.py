"""The constructs the respot stack is composed of, one per concern."""

from infra.constructs.credentials import JobCredentials
from infra.constructs.fleet import FixedImage, Fleet
from infra.constructs.functions import ControlFunctions
from infra.constructs.messaging import Messaging
from infra.constructs.network import Network, SubnetPlacement
from infra.constructs.researchers import ResearcherAccess
from infra.constructs.selftest import SelftestExperiment
from infra.constructs.storage import JobStore

__all__ = [
    "ControlFunctions",
    "FixedImage",
    "Fleet",
    "JobCredentials",
    "JobStore",
    "Messaging",
    "Network",
    "ResearcherAccess",
    "SelftestExperiment",
    "SubnetPlacement",
]
