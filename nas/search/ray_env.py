"""Ray for a search: the process environment set before Ray is imported, init, trial resources, results.

Ray reads some settings from the environment when it is imported, so `configure_ray_env()` must run
first; nothing here changes `os.environ` on import. Every function that needs Ray calls it, then
imports Ray; code that imports Ray (or `nas.search.tune_runner`) itself calls it first.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .settings import SearchSettings

__all__ = ["configure_ray_env", "init_ray", "ray_results_dir", "trial_resources"]

log = logging.getLogger(__name__)

# Keep a local Ray on 127.0.0.1 (a multi-node cluster sets this to 1 itself) and quiet: no usage
# stats, no log deduplication, Tune's legacy output (which honours verbose=0).
RAY_ENV_DEFAULTS = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_AIR_NEW_OUTPUT": "0",
}
NOISY_LOGGERS = ("tensorboardX", "ray.tune.logger")  # progress reports carry +inf and nested records
# Ray turns token authentication on for a new local cluster and says so at every start; the search
# keeps it on, and only this notice is dropped (its opt-out advice is not one a search should follow).
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"


class _DropMessage(logging.Filter):
    """Drops the log records whose message starts with `prefix`."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def configure_ray_env() -> None:
    """Set Ray's environment defaults (a value already set wins) and quiet its noisy loggers."""
    for key, value in RAY_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.ERROR)
    auth = logging.getLogger(TOKEN_AUTH_LOGGER)
    if not any(isinstance(f, _DropMessage) for f in auth.filters):
        auth.addFilter(_DropMessage(TOKEN_AUTH_NOTICE))


def init_ray(settings: SearchSettings) -> None:
    """Join `ray_address`, or start a local Ray on 127.0.0.1 with one CPU per worker."""
    configure_ray_env()
    import ray

    if ray.is_initialized():
        return
    if settings.ray_address:
        ray.init(address=settings.ray_address, log_to_driver=False, logging_level=logging.WARNING)
        nodes = sum(node["Alive"] for node in ray.nodes())
        if nodes > 1 and not settings.ray_dir:
            log.warning(
                "the Ray cluster has %d nodes but --ray-dir is not set: Tune's trial files stay on the disk "
                "of the node that ran each trial; pass a folder every node shares, or an s3:// URI",
                nodes,
            )
    else:
        ray.init(
            num_cpus=settings.workers,
            num_gpus=None,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            _node_ip_address="127.0.0.1",
        )
    configure_ray_env()  # again: ray.init configured its loggers


def trial_resources(settings: SearchSettings) -> dict:
    """One CPU per trial, plus a GPU share: `gpus_per_trial` (0 = none), or when it is None the
    cluster's GPUs shared evenly among the `workers` concurrent trials (none on a CPU cluster).

    Ray packs fractional shares onto one GPU: 0.25 runs up to 4 trials per GPU.
    """
    configure_ray_env()
    import ray

    gpus, available = settings.gpus_per_trial, ray.cluster_resources().get("GPU", 0)
    if gpus is None:
        gpus = available / max(1, settings.workers)
    elif gpus > available:  # not an error: a GPU node may still be joining the cluster
        log.warning(
            "each trial asks for %g GPU but the Ray cluster has %g now: trials wait for a GPU node", gpus, available
        )
    return {"cpu": 1, "gpu": gpus} if gpus else {"cpu": 1}


def ray_results_dir(settings: SearchSettings, store_url: str) -> str:
    """Tune's storage_path: settings.ray_dir, else `.resnas/ray` beside a SQLite file or in the cwd."""
    if settings.ray_dir:
        return settings.ray_dir
    if store_url.startswith("sqlite:///"):
        return str(Path(store_url.removeprefix("sqlite:///")).resolve().parent / ".resnas" / "ray")
    return str(Path.cwd() / ".resnas" / "ray")
