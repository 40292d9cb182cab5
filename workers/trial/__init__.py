"""One proxy trial: `run_trial` (one iso-FLOP run, on a budget ladder or at one budget), replica rungs on the
target's path (`replica`), the width certificate (`width_probe`), what a trial measured (`result`), and what the
search and a trial exchange (`contract`: the ticket, the request, the rung gate, the outcome), carried out by
`execute.run_request`."""

from .contract import (
    CountedCosts,
    Measurement,
    RungGate,
    RungVerdict,
    TrialConfigs,
    TrialOutcome,
    TrialRequest,
    TrialTicket,
    Verdict,
)
from .execute import run_request
from .result import TrialResult, WidthCertificate
from .run import run_trial
from .width_probe import width_certificate

__all__ = [
    "CountedCosts",
    "Measurement",
    "RungGate",
    "RungVerdict",
    "TrialConfigs",
    "TrialOutcome",
    "TrialRequest",
    "TrialResult",
    "TrialTicket",
    "Verdict",
    "WidthCertificate",
    "run_request",
    "run_trial",
    "width_certificate",
]
