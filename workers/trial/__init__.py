"""One proxy trial: `run_trial` (one iso-FLOP run, on a budget ladder or at one budget), replica rungs on the
target's path (`replica`), the width certificate (`width_probe`), and what the search and a trial exchange
(`contract`: the ticket, the request, the rung gate, the outcome), carried out by `execute.run_request`."""

from .contract import Measurement, RungGate, RungVerdict, TrialOutcome, TrialRequest, TrialTicket
from .execute import run_request
from .run import TrialResult, run_trial
from .width_probe import WidthCertificate, width_certificate

__all__ = [
    "Measurement",
    "RungGate",
    "RungVerdict",
    "TrialOutcome",
    "TrialRequest",
    "TrialResult",
    "TrialTicket",
    "WidthCertificate",
    "run_request",
    "run_trial",
    "width_certificate",
]
