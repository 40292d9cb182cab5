"""One proxy trial: `run_trial` (one iso-FLOP run, on a budget ladder or at one budget), replica rungs on the
target's path (`replica`), the width certificate (`width_probe`), what a trial measured (`result`), and what the
search and a trial exchange (`contract`: the ticket, the request, the rung gate, the outcome), carried out by
`execute.run_request`."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .contract import (
        CountedCosts,
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

__getattr__ = lazy_exports(
    __name__,
    {
        "CountedCosts": ".contract",
        "RungGate": ".contract",
        "RungVerdict": ".contract",
        "TrialConfigs": ".contract",
        "TrialOutcome": ".contract",
        "TrialRequest": ".contract",
        "TrialTicket": ".contract",
        "Verdict": ".contract",
        "run_request": ".execute",
        "TrialResult": ".result",
        "WidthCertificate": ".result",
        "run_trial": ".run",
        "width_certificate": ".width_probe",
    },
)
