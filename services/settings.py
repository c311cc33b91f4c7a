"""All configuration of the service, read from ``EVALSET_*`` environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from stan_free_models.fit_settings import DOOR_NUTS


class Settings(BaseSettings):
    """One place for every setting of the store, the API and streaming re-estimation.

    Example:
        >>> Settings(database_url="sqlite:///:memory:").refit_every_judgments
        1000
    """

    model_config = SettingsConfigDict(env_prefix="EVALSET_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///evalset.db",
        description="SQLAlchemy URL: a SQLite file (WAL mode) or postgresql+psycopg://...",
    )
    host: str = "127.0.0.1"
    port: int = 8000
    admin_token: str | None = Field(
        default=None,
        description="when set, creating a project needs this bearer token",
    )
    open: bool = Field(
        default=False,
        description="let `evalset serve` run without an admin token: anyone who reaches the "
        "service can create projects (it refuses to start otherwise)",
    )
    sqlite_synchronous: Literal["FULL", "EXTRA", "NORMAL"] = Field(
        default="FULL",
        description="SQLite's synchronous pragma: FULL makes an acknowledged batch survive a "
        "power loss; NORMAL only a killed process",
    )

    # limits (each answered with the common JSON error body)
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1024,
        description="largest request body in bytes (413 payload_too_large, checked while reading)",
    )
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, description="time a client has to send its whole body (else 408)"
    )
    rate_limit_per_second: float = Field(
        default=100.0,
        ge=0,
        description="requests per second per token (per client address without one); "
        "0: no limit (429 with Retry-After beyond it)",
    )
    rate_limit_burst: int = Field(
        default=200, ge=1, description="requests a client may send at once above that rate"
    )
    create_project_per_minute: float | None = Field(
        default=None,
        ge=0,
        description="project creations per minute per client address (bursts of 10); "
        "default: 30 when `evalset serve` runs open (no admin token), else no limit",
    )
    forwarded_allow_ips: str | None = Field(
        default=None,
        description="comma-separated addresses or networks of the reverse proxies whose "
        "X-Forwarded-For and X-Forwarded-Proto name the client ('*': any peer); default: "
        "none, the client is the connection's peer",
    )
    token_cache_seconds: float = Field(
        default=1.0,
        ge=0,
        description="how long a replica trusts a token it checked: a revoked token stops "
        "working on every replica within this time",
    )
    leader_election: bool = Field(
        default=True,
        description="on PostgreSQL, one replica re-estimates each project (a session advisory "
        "lock); another takes over within poll_seconds when it dies",
    )
    supervise_seconds: float = Field(
        default=1.0, gt=0, description="how often a dead re-estimation worker is looked for"
    )
    max_batch_size: int = Field(default=10_000, ge=1, description="judgments per POST")
    max_bulk_size: int = Field(default=50_000, ge=1, description="systems/prompts per POST")

    # streaming re-estimation
    streaming: bool = Field(default=True, description="run the background re-estimation worker")
    fast_num_draws: int = Field(
        default=500, ge=10, le=4000, description="Laplace draws per fast update"
    )
    fast_min_interval_seconds: float = Field(
        default=0.0, ge=0.0, description="minimum gap between two fast updates of one dimension"
    )
    worker: Literal["thread", "process"] = Field(
        default="thread",
        description=(
            "where re-estimation runs: a thread of the API process, or a process of its own "
            "(fits and compiles then never hold the request threads' GIL)"
        ),
    )
    refits: Literal["local", "ray"] = Field(
        default="local",
        description="where the re-estimation fits run: in the worker itself, or as Ray tasks "
        "(one CPU each) on the cluster of ray_address, for more keys than the worker has "
        "cores or judgments past its memory; each snapshot then names its node "
        "(diagnostics.fitted_on)",
    )
    ray_address: str | None = Field(
        default=None,
        description="with refits=ray, the Ray cluster to join (e.g. ray://head:10001 or "
        "head:6379); default: the RAY_ADDRESS environment variable, else a Ray runtime "
        "started on this machine",
    )
    refit_parallel: int = Field(
        default=0,
        ge=0,
        description="keys fitted at once (a fast-update thread each; one key is never "
        "fitted by two at a time); 0: 1 with refits=local, the Ray cluster's CPUs with "
        "refits=ray",
    )
    worker_nice: int = Field(
        default=5, ge=0, le=19, description="scheduling priority offset of the worker process"
    )
    worker_cpus: int = Field(
        default=0,
        ge=0,
        description="CPUs the worker process may use; 0: all but one (at least one), so the "
        "requests always have a CPU of their own",
    )
    cell_effect: bool = Field(
        default=False,
        description="fit a prompt-by-comparison effect (a grid of fits over its sd) instead of "
        "the default's cluster-robust intervals; many times slower, and skill_updates then has "
        "no effect",
    )
    skill_updates: bool = Field(
        default=False,
        description="between full fast fits, update only the skills (item parameters held, "
        "refreshed on their own schedule); off by default: every update refits the items too",
    )
    items_every_judgments: int = Field(
        default=500, ge=1, description="refresh item parameters after this many new judgments"
    )
    items_every_share: float = Field(
        default=0.05, gt=0, le=1, description="... or this share of the judgments, if more"
    )
    items_max_lag: float = Field(
        default=4.0,
        gt=0,
        description="past this many such windows without a refresh under way, a fast update "
        "is a full fit",
    )
    items_sync_below: int = Field(
        default=20_000,
        ge=0,
        description="below this many judgments, judgments on a new prompt get a full fit at "
        "once instead of waiting for the items refresh",
    )
    refit_every_judgments: int = Field(
        default=1000, ge=1, description="full NUTS refit after this many new judgments"
    )
    refit_every_seconds: float = Field(
        default=600.0, gt=0, description="... or after this many seconds with new judgments"
    )
    check_every_seconds: float = Field(
        default=600.0,
        ge=0,
        description="above nuts_max_judgments, refit a dimension from no warm start this often "
        "(with new judgments) and compare it with the live snapshot (/health's checks; a fit's "
        "time and memory beside the live updates); 0: never",
    )
    poll_seconds: float = Field(
        default=5.0, gt=0, description="how often to look for judgments written elsewhere"
    )
    prepare_next_shape: bool = Field(
        default=True,
        description="past 80% of the rows (judged cells, with the default model) or prompts "
        "the fits' compiled programs are padded to, compile the next padded size on a thread "
        "of its own, so the update that crosses into it does not wait on a compile",
    )
    nuts: bool = Field(default=True, description="run the scheduled NUTS refits at all")
    nuts_max_judgments: int = Field(
        default=30_000,
        ge=0,
        description="scheduled NUTS refits only up to this many judgments per dimension; "
        "above it a refit takes many minutes and slows every fast update meanwhile, and the "
        "fast updates' cluster-robust Laplace intervals are the answer (a 'skipped' event "
        "says so once) and check_every_seconds' checks compare them with a fit from scratch",
    )
    nuts_chains: int = Field(default=2, ge=1)
    # NUTS's run sizes of every door (stan_free_models.fit_settings.DOOR_NUTS); the service
    # runs fewer chains
    nuts_warmup: int = Field(default=DOOR_NUTS.num_warmup, ge=10)
    nuts_samples: int = Field(
        default=DOOR_NUTS.num_samples, ge=10, description="draws per chain and block"
    )
    nuts_min_ess: float = Field(
        default=0.0,
        ge=0,
        description="blocks of draws until this bulk and tail ESS (the doors' is "
        f"{DOOR_NUTS.min_ess:g}); 0: one block, the refit then passes or fails on nuts_max_rhat",
    )
    nuts_max_rhat: float = Field(default=DOOR_NUTS.max_rhat, gt=1.0)
    nuts_max_divergences: int = Field(default=0, ge=0)
    snapshot_max_draws: int = Field(default=1000, ge=10, description="draws kept per snapshot")
    seed: int = 0
