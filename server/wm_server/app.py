"""The composition root: builds the store, the services, the Phase 2 worker and the gRPC
server from the settings, and runs them until a signal asks to stop.

It is long (about 700 lines) because it is the one place where the parts meet: every step
of a start is a named function here (the providers, the storage, the services, the gRPC
server, serving, the web doors, the ready line), so what is built from which setting, and
in what order, is read in one module rather than followed across several.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from wm_client.channel import reachable_address
from wm_core import SessionSettings, WmLimits, summary_update_ops
from wm_proto.v1 import working_memory_service_pb2 as service_pb2
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.api import session_config, stored_wire
from wm_server.api.admission import Admission, Limits
from wm_server.api.commit_event_encoder import encode_event
from wm_server.api.interceptors import RpcInterceptor
from wm_server.api.reflection import enable_reflection
from wm_server.api.registration import GenericOnly
from wm_server.api.servicer import WorkingMemoryServicer
from wm_server.breaker import BreakerSettings
from wm_server.config import ConfigurationError, Settings, parse_origins, split_host_port
from wm_server.embedding.factory import build_embedder
from wm_server.embedding.port import Embedder
from wm_server.errors import InvalidArgument
from wm_server.event_loop import running_loop_name
from wm_server.llm.factory import (
    ProviderConfigurationError,
    ProviderRegistry,
    build_registry,
    check_choice,
)
from wm_server.llm.port import LlmProvider
from wm_server.phase2.chunked import InputBudget
from wm_server.phase2.settings import WorkerSettings
from wm_server.phase2.store import JobStore
from wm_server.phase2.worker import Phase2Worker
from wm_server.security.auth import ApiKeyring, check_bind_safety, load_keyring
from wm_server.security.tls import server_credentials, server_ssl_context, tls_mode
from wm_server.services.archive_search import ArchiveSearchService
from wm_server.services.archives import ArchiveService
from wm_server.services.auto_commit import IdleSweeper
from wm_server.services.commit_event_log import EventLog
from wm_server.services.commit_wakeups import EventBus
from wm_server.services.commits import CommitService
from wm_server.services.context_assembly import ContextService
from wm_server.services.embedding_index import EmbeddingIndexer
from wm_server.services.extraction_preview import ExtractionPreviewService
from wm_server.services.maintenance import Maintenance
from wm_server.services.memories import MemoryService
from wm_server.services.memory_consolidation import VectorConsolidation
from wm_server.services.memory_lifecycle import MemoryUpkeep
from wm_server.services.paging import PageTokens, load_tokens
from wm_server.services.recall import HybridRecall
from wm_server.services.recall_warmup import RecallWarmup
from wm_server.services.sessions import SessionService
from wm_server.services.tool_outputs import ToolOutputService
from wm_server.services.user_data import UserDataService
from wm_server.services.working_memory import WorkingMemoryService
from wm_server.storage.database import Database
from wm_server.storage.sqlite import SqliteDatabase
from wm_server.telemetry.metrics import Metrics
from wm_server.telemetry.observability import ACCESS_LOG
from wm_server.telemetry.tracing import NO_TRACING, OtelTracing, otlp_tracing

if TYPE_CHECKING:  # the doors are imported where they start: aiohttp only when one is on
    from wm_server.api.connect import HttpDoor
    from wm_server.inspector import Inspector

log = structlog.get_logger("wm_server")

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["WorkingMemoryService"].full_name


def max_receive_bytes(settings: Settings) -> int:
    """The largest request either door reads (a batch of messages at the message limit)."""
    return max(4 * 1024 * 1024, settings.max_message_bytes * 4)


def server_options(settings: Settings) -> list[tuple[str, int]]:
    """Channel settings for a server behind a load balancer or mesh (grpc-conventions 2.3)."""
    max_receive = max_receive_bytes(settings)
    return [
        ("grpc.max_receive_message_length", max_receive),
        ("grpc.max_send_message_length", max(16 * 1024 * 1024, max_receive)),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.max_connection_age_ms", 300_000),
        ("grpc.max_connection_age_grace_ms", 30_000),
        ("grpc.so_reuseport", 0),
    ]


@dataclass
class Application:
    """A running server and everything it owns."""

    settings: Settings
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    database: Database
    worker: Phase2Worker
    provider: LlmProvider
    providers: ProviderRegistry | None = (
        None  # every configured provider; ``provider`` is its default
    )
    maintenance: Maintenance | None = None
    embedding: EmbeddingIndexer | None = None
    sweeper: IdleSweeper | None = None
    warmup: RecallWarmup | None = None  # the recall indexes read in after start
    bus: EventBus | None = None
    metrics: Metrics | None = None
    metrics_port: int | None = None
    inspector: Inspector | None = None
    http: HttpDoor | None = None  # the Connect door (WM_HTTP_ADDRESS)
    tracing: OtelTracing | None = None  # OpenTelemetry, when configured (telemetry/tracing.py)
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def address(self) -> str:
        host, _ = split_host_port(self.settings.address)
        return f"{host}:{self.port}"

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING, drain, then stop the server within ``grace`` seconds.

        Running Phase 2 jobs give their lease back (a restart or another replica resumes
        them), then open commit streams send what is stored and end UNAVAILABLE with the
        sequence to resume from, so ``server.stop`` need not cut them at the end of grace.
        """
        if self._stopped.is_set():
            return
        self._stopped.set()
        await self._drain()
        await self._stop_work()
        await self._stop_servers(self.settings.shutdown_grace_seconds if grace is None else grace)
        await self._release()
        log.info("server_stopped")

    async def _drain(self) -> None:
        """Health NOT_SERVING, then the drain delay, so load balancers stop sending calls."""
        await self.health.enter_graceful_shutdown()
        if self.settings.shutdown_drain_seconds:
            await asyncio.sleep(self.settings.shutdown_drain_seconds)

    async def _stop_work(self) -> None:
        """The inspector, then the loops that start work (the sweeper, the Phase 2 worker,
        maintenance, the embedding indexer), then the event bus, which ends open streams."""
        if self.inspector is not None:
            await self.inspector.stop()
        if self.sweeper is not None:
            await self.sweeper.stop()
        if self.warmup is not None:
            await self.warmup.stop()
        await self.worker.stop()
        if self.maintenance is not None:
            await self.maintenance.stop()
        if self.embedding is not None:
            await self.embedding.stop()
        if self.bus is not None:
            self.bus.close()

    async def _stop_servers(self, grace: float) -> None:
        """The gRPC server and the HTTP door, side by side, within ``grace`` seconds."""
        if self.http is not None:
            await asyncio.gather(self.server.stop(grace), self.http.stop(grace))
        else:
            await self.server.stop(grace)

    async def _release(self) -> None:
        """What outlives the servers: the metrics endpoint, the model providers, the
        database, the trace exporter (its last spans) and the access log (its last lines)."""
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.stop)
        if self.providers is not None:
            await self.providers.aclose()
        else:
            await self.provider.aclose()
        await self.database.close()
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)  # the last spans exported
        ACCESS_LOG.flush()  # the access lines of the last RPCs


def _model_check(providers: ProviderRegistry, settings: Settings) -> session_config.ModelCheck:
    """What is wrong with a session's model choice, or None: the provider must be one this
    server configured, and a model, when named, the one that provider runs here."""

    def check(name: str, model: str) -> str | None:
        try:
            chosen = check_choice(providers, settings, name, model or None)
        except ProviderConfigurationError as error:
            return str(error)
        if model and model != chosen.model:
            return f"provider {name!r} runs model {chosen.model!r} on this server"
        return None

    return check


def _session_provider(providers: ProviderRegistry, name: str | None) -> LlmProvider:
    """The provider a session chose; the default when it chose none, or chose one this
    server no longer configures (its config was written under other settings)."""
    if name is None or name not in providers.names:
        return providers.default
    return providers.get(name)


def build_database(settings: Settings) -> Database:
    """SQLite by default; PostgreSQL when WM_DATABASE_URL says so."""
    if settings.database_url and settings.database_url.startswith(("postgresql://", "postgres://")):
        from wm_server.storage.postgres import PostgresDatabase

        return PostgresDatabase(settings.database_url, text_language=settings.text_language)
    return SqliteDatabase(
        settings.sqlite_path,
        lock_timeout=settings.sqlite_lock_timeout,
        text_language=settings.text_language,
    )


async def start_application(
    settings: Settings,
    *,
    provider: LlmProvider | None = None,
    tracing: OtelTracing | None = None,
) -> Application:
    """Build and start everything; the returned application is serving. ``provider``
    replaces the configured model (tests drive Phase 2 with prepared answers this way);
    ``tracing`` the OTLP tracing ``OTEL_EXPORTER_OTLP_ENDPOINT`` would install (tests
    export to memory that way).

    The steps, in order: the settings that must hold before anything opens (keys, TLS),
    the model providers, the storage, the services, the gRPC server with its port bound;
    then the server and the loops start, the inspector and the HTTP door open, and the
    start is logged. A failure before the server starts closes what was opened; after,
    the application stops."""
    tracing = tracing or otlp_tracing()
    keyring = load_keyring(settings)
    check_bind_safety(settings, keyring)
    credentials = server_credentials(settings)
    metrics = Metrics()
    providers = await _build_providers(settings, provider)
    database = build_database(settings)
    try:
        storage = await _open_storage(database, settings, metrics)
        services = _build_services(settings, providers, storage, metrics, tracing)
        door = _build_grpc_server(
            settings, services.servicer, keyring, credentials, metrics, tracing
        )
    except BaseException:
        await providers.aclose()
        await database.close()
        raise
    app = await _start_serving(settings, providers, storage, services, door, metrics, tracing)
    await _open_web_doors(app, settings, services, door, keyring, metrics)
    _log_started(app, providers, keyring)
    return app


async def _build_providers(settings: Settings, provider: LlmProvider | None) -> ProviderRegistry:
    """Every configured model provider, first of all: a missing key or an unknown model stops
    the start before anything opens. ``provider``, when given, is the only one."""
    if provider is not None:
        return ProviderRegistry.single(provider)
    return await build_registry(settings)


@dataclass
class _Storage:
    """The open database and what reads it from the start: the page-token keys and recall by
    meaning (the embedder, the recall that caches its vectors, the indexer that stores them)."""

    database: Database
    tokens: PageTokens
    embedder: Embedder | None
    recall: HybridRecall
    indexer: EmbeddingIndexer | None


async def _open_storage(database: Database, settings: Settings, metrics: Metrics) -> _Storage:
    """Open the database (its schema migrated) and load what the services read from it."""
    await database.open()
    configured_key = settings.page_token_key
    tokens = await load_tokens(
        database, configured_key.get_secret_value() if configured_key else None
    )
    # Recall by meaning: the embedder loads now (no download: a missing model stops the
    # start), and stored vectors of another length than it makes are refused.
    embedder = build_embedder(settings)
    recall = HybridRecall(
        embedder, observer=metrics, max_bytes=settings.recall_cache_mb * 1024 * 1024
    )
    indexer = EmbeddingIndexer(database, embedder, observer=metrics) if embedder else None
    if indexer is not None:
        await indexer.check_dimensions()
    return _Storage(database, tokens, embedder, recall, indexer)


@dataclass
class _Services:
    """The composition: the use cases behind the servicer, and the loops that run beside it."""

    servicer: WorkingMemoryServicer
    default_config: SessionSettings
    bus: EventBus
    jobs: JobStore
    worker: Phase2Worker
    maintenance: Maintenance
    sweeper: IdleSweeper


def _build_services(
    settings: Settings,
    providers: ProviderRegistry,
    storage: _Storage,
    metrics: Metrics,
    tracing: OtelTracing | None,
) -> _Services:
    """Build every service over the storage and the providers; nothing runs yet."""
    database, tokens, embedder = storage.database, storage.tokens, storage.embedder
    recall, indexer, provider = storage.recall, storage.indexer, providers.default
    bus = EventBus()
    database.subscribe_events(bus.publish)  # other replicas' events wake this one's streams
    log_ = EventLog(encode_event, bus)  # this process's are handed to its streams
    check_model = _model_check(providers, settings)
    try:
        default_config = session_config.settings_from_json(
            settings.default_session_config, check_model
        )
    except (ValueError, InvalidArgument) as error:
        raise ConfigurationError(f"WM_DEFAULT_SESSION_CONFIG: {error}") from None
    jobs = JobStore(database, log_)
    upkeep = MemoryUpkeep(
        database,
        retention_days=settings.memory_retention,
        threshold=settings.memory_consolidation_threshold,
        vectors=(
            VectorConsolidation(embedder.model_id, settings.memory_vector_consolidation_threshold)
            if embedder is not None
            else None
        ),
    )
    maintenance = Maintenance(
        database, retention_seconds=settings.request_id_retention_seconds, memories=upkeep
    )
    limits = WmLimits(
        total_tokens=settings.working_memory_max_tokens,
        section_tokens=settings.working_memory_section_max_tokens,
        key_facts_tokens=settings.working_memory_key_facts_max_tokens,
    )
    worker = Phase2Worker(
        jobs,
        provider,
        WorkerSettings(
            concurrency=settings.phase2_concurrency,
            max_attempts=settings.phase2_max_attempts,
            retry_base_delay=settings.phase2_retry_base_delay,
            lease_seconds=settings.phase2_lease_seconds,
            max_wait_seconds=settings.phase2_max_wait_seconds,
            retry_max_delay=settings.phase2_retry_max_delay,
            breaker=BreakerSettings(
                threshold=settings.phase2_breaker_threshold,
                cooldown=settings.phase2_breaker_cooldown_seconds,
                max_cooldown=settings.phase2_retry_max_delay,
            ),
            max_pending_items=settings.phase2_max_pending_items,
            max_pending_tokens=settings.phase2_max_pending_tokens,
            max_chunks=settings.phase2_max_chunks,
            progress_seconds=settings.phase2_progress_seconds,
            memory_extraction=settings.memory_extraction,
            limits=limits,
            input=InputBudget(
                tokens=settings.phase2_input_tokens,
                default_tokens=settings.phase2_default_input_tokens,
            ),
        ),
        observer=metrics,
        indexer=indexer,
        backfill=summary_update_ops,
        provider_for=lambda name: _session_provider(providers, name),
        tracing=tracing or NO_TRACING,
    )
    commits = CommitService(
        database,
        bus,
        log_,
        heartbeat_seconds=settings.heartbeat_seconds,
        on_enqueued=worker.wake,
        tokens=tokens,
    )
    sweeper = IdleSweeper(commits, interval_seconds=settings.auto_commit_sweep_seconds)
    memories = MemoryService(
        database,
        tokens=tokens,
        on_deleted=maintenance.forgotten,
        retention=upkeep.retention,
        recall=recall,
        written=indexer.wake if indexer else None,
    )
    servicer = WorkingMemoryServicer(
        sessions=SessionService(
            database,
            log=log_,
            default_config=default_config,
            on_deleted=maintenance.wake,
            on_enqueued=worker.wake,
            tokens=tokens,
            tool_output_inline_chars=settings.tool_output_inline_chars,
        ),
        commits=commits,
        memory=WorkingMemoryService(
            database,
            limits,
            max_pending_items=settings.phase2_max_pending_items,
            max_pending_tokens=settings.phase2_max_pending_tokens,
        ),
        archives=ArchiveService(database, tokens=tokens),
        context=ContextService(database, memories=memories, recall=recall),
        archive_search=ArchiveSearchService(database, recall),
        tool_outputs=ToolOutputService(database, tokens=tokens),
        memories=memories,
        max_message_bytes=settings.max_message_bytes,
        default_config=default_config,
        check_model=check_model,
        preview=ExtractionPreviewService(
            database,
            lambda name: _session_provider(providers, name),
            enabled_by_server=settings.memory_extraction,
            input_tokens=InputBudget(
                tokens=settings.phase2_input_tokens,
                default_tokens=settings.phase2_default_input_tokens,
            ).for_provider,
        ),
        user_data=UserDataService(database, on_deleted=maintenance.forgotten),
    )
    return _Services(
        servicer=servicer,
        default_config=default_config,
        bus=bus,
        jobs=jobs,
        worker=worker,
        maintenance=maintenance,
        sweeper=sweeper,
    )


def _build_admission(settings: Settings, metrics: Metrics) -> Admission:
    """The per-tenant budgets both doors admit calls by (watched by the metrics); a warning
    when gRPC's own process cap is reached before them."""
    admission = Admission(
        Limits(
            tenant_rpcs=settings.tenant_max_concurrent_rpcs,
            tenant_streams=settings.tenant_max_streams,
            anonymous_rpcs=settings.anonymous_max_concurrent_rpcs,
            mutations_per_second=settings.tenant_mutations_per_second,
            mutation_burst=settings.tenant_mutation_burst,
        )
    )
    metrics.watch_tenants(admission.budgets)
    one_tenant = (
        settings.tenant_max_concurrent_rpcs
        + settings.tenant_max_streams
        + settings.anonymous_max_concurrent_rpcs
    )
    if settings.max_concurrent_rpcs <= one_tenant:
        # gRPC's own cap is reached before a tenant's budgets: one tenant could fill it.
        log.warning(
            "process_cap_below_tenant_budgets",
            max_concurrent_rpcs=settings.max_concurrent_rpcs,
            one_tenant_and_anonymous=one_tenant,
        )
    return admission


@dataclass
class _GrpcDoor:
    """The gRPC server, bound to its port but not started, and what the HTTP door shares
    with it (the health servicer, the admission budgets)."""

    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    admission: Admission


def _build_grpc_server(
    settings: Settings,
    servicer: WorkingMemoryServicer,
    keyring: ApiKeyring | None,
    credentials: grpc.ServerCredentials | None,
    metrics: Metrics,
    tracing: OtelTracing | None,
) -> _GrpcDoor:
    """The gRPC server with its interceptors, the service, health and reflection, bound to
    WM_ADDRESS (an address it cannot listen on is a configuration error)."""
    admission = _build_admission(settings, metrics)
    interceptors: list[grpc.aio.ServerInterceptor] = [_interceptor(keyring, metrics, admission)]
    if tracing is not None:  # outermost: the server span covers admission and auth too
        interceptors.insert(0, tracing.server_interceptor())
    server = grpc.aio.server(
        interceptors=interceptors,
        options=server_options(settings),
        maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
    )
    registry = GenericOnly(server)
    registry.add(service_grpc.add_WorkingMemoryServiceServicer_to_server, servicer)
    health_servicer = health.aio.HealthServicer()
    registry.add(health_pb2_grpc.add_HealthServicer_to_server, health_servicer)
    if settings.reflection:
        enable_reflection((SERVICE_NAME, health.SERVICE_NAME), registry)
    try:
        if credentials is None:
            port = server.add_insecure_port(settings.address)
        else:
            port = server.add_secure_port(settings.address, credentials)
    except RuntimeError as exc:  # in use (port reuse is off) or not an address of this host
        message = f"WM_ADDRESS: cannot listen on {settings.address}: {exc}"
        raise ConfigurationError(message) from None
    return _GrpcDoor(server, health_servicer, port, admission)


async def _start_serving(
    settings: Settings,
    providers: ProviderRegistry,
    storage: _Storage,
    services: _Services,
    door: _GrpcDoor,
    metrics: Metrics,
    tracing: OtelTracing | None,
) -> Application:
    """Start the gRPC server, the metrics endpoint and the background loops, then report
    SERVING; the application owns them all from here."""
    await door.server.start()
    metrics.watch_queue(services.jobs.open_count)
    metrics_port = metrics.serve(settings.metrics_address) if settings.metrics_address else None
    await services.worker.start()
    services.maintenance.start()
    services.sweeper.start()
    if storage.indexer is not None:
        storage.indexer.start()  # the backfill: rows stored without a vector of this model
    warmup = RecallWarmup(storage.database, storage.recall, observer=metrics)
    warmup.start()  # the first search after a restart need not read its index
    for name in ("", SERVICE_NAME):
        await door.health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return Application(
        settings=settings,
        server=door.server,
        health=door.health,
        port=door.port,
        database=storage.database,
        worker=services.worker,
        provider=providers.default,
        providers=providers,
        maintenance=services.maintenance,
        embedding=storage.indexer,
        sweeper=services.sweeper,
        warmup=warmup,
        bus=services.bus,
        metrics=metrics,
        metrics_port=metrics_port,
        tracing=tracing,
    )


async def _open_web_doors(
    app: Application,
    settings: Settings,
    services: _Services,
    door: _GrpcDoor,
    keyring: ApiKeyring | None,
    metrics: Metrics,
) -> None:
    """The inspector and the HTTP door, each when its address is set (one that cannot open
    stops the application)."""
    if settings.inspector_address:
        app.inspector = await _start_inspector(
            app, settings, keys_required=keyring is not None, default_config=services.default_config
        )
    if settings.http_address:
        app.http = await _start_http_door(app, settings, services.servicer, door, keyring, metrics)


def _log_started(app: Application, providers: ProviderRegistry, keyring: ApiKeyring | None) -> None:
    """The ``server_started`` line: where the server listens and how it is configured."""
    provider = providers.default
    log.info(
        "server_started",
        address=app.address,
        event_loop=running_loop_name(),
        provider=provider.name,
        model=provider.model,
        providers=list(providers.names),
        auth="api_keys" if keyring else "off",
        tenants=len(keyring.tenants) if keyring else 0,
        tls=tls_mode(app.settings).value,
        metrics_port=app.metrics_port,
        inspector_port=app.inspector.port if app.inspector is not None else None,
        http_port=app.http.port if app.http is not None else None,
    )


def _interceptor(
    keyring: ApiKeyring | None, metrics: Metrics, admission: Admission
) -> RpcInterceptor:
    """The one per-call wrapper; each door gets its own instance (the wrapper caches its
    wrapped handlers by method), over the same keyring, metrics and budgets."""
    return RpcInterceptor(keyring=keyring, metrics=metrics, admission=admission)


async def _start_inspector(
    app: Application,
    settings: Settings,
    *,
    keys_required: bool,
    default_config: SessionSettings,
) -> Inspector:
    """The web inspector reads through this server's own gRPC port, over loopback in plain
    text; with TLS on that port it cannot, and says so rather than serve errors."""
    from wm_server.inspector import ConfigDefaults, start_inspector

    assert settings.inspector_address
    if tls_mode(settings).value != "off":
        await app.stop(0)
        raise ConfigurationError("WM_INSPECTOR_ADDRESS: the inspector needs gRPC without TLS")
    try:
        return await start_inspector(
            settings.inspector_address,
            reachable_address(app.address),
            keys_required=keys_required,
            config_defaults=ConfigDefaults(
                server_default=stored_wire.config_out(default_config),
                unset={
                    "memory_extraction": f"on (WM_MEMORY_EXTRACTION={settings.memory_extraction})"
                    if settings.memory_extraction
                    else "off (WM_MEMORY_EXTRACTION=false)",
                    "tool_output_inline_chars": f"{settings.tool_output_inline_chars:,}"
                    " (WM_TOOL_OUTPUT_INLINE_CHARS)",
                    "model.provider": f"{settings.provider.value} (the server's default provider)",
                    "model.model": "the provider's configured model",
                },
            ),
        )
    except (OSError, ValueError) as exc:
        await app.stop(0)
        raise ConfigurationError(
            f"WM_INSPECTOR_ADDRESS: cannot listen on {settings.inspector_address}: {exc}"
        ) from None


async def _start_http_door(
    app: Application,
    settings: Settings,
    servicer: WorkingMemoryServicer,
    door: _GrpcDoor,
    keyring: ApiKeyring | None,
    metrics: Metrics,
) -> HttpDoor:
    """The Connect door (HTTP/JSON) over the same servicer, health and budgets as gRPC, with
    its own interceptor; an address it cannot listen on stops the application."""
    from wm_server.api.connect import start_http_door
    from wm_server.api.cors import Cors

    assert settings.http_address
    registrations: list[tuple[Callable[..., None], object]] = [
        (service_grpc.add_WorkingMemoryServiceServicer_to_server, servicer),
        (health_pb2_grpc.add_HealthServicer_to_server, door.health),
    ]
    try:
        return await start_http_door(
            settings.http_address,
            _interceptor(keyring, metrics, door.admission),
            registrations,
            max_body_bytes=max_receive_bytes(settings),
            ssl_context=server_ssl_context(settings),
            cors=Cors(parse_origins(settings.http_cors_origins)),
        )
    except OSError as exc:
        await app.stop(0)
        raise ConfigurationError(
            f"WM_HTTP_ADDRESS: cannot listen on {settings.http_address}: {exc}"
        ) from None


def ready_line(app: Application, settings: Settings) -> tuple[str, dict[str, str]]:
    """The ready line: the gRPC address, then the HTTP door's and the inspector's URLs when
    they are on, and what to try next; and those URLs as log fields."""
    doors: dict[str, str] = {}
    if app.http is not None and settings.http_address:
        scheme = "https" if tls_mode(settings).value != "off" else "http"
        host = settings.http_address.rpartition(":")[0]
        doors["http_address"] = f"{scheme}://{host}:{app.http.port}"
    if app.inspector is not None and settings.inspector_address:
        host = settings.inspector_address.rpartition(":")[0]
        doors["inspector_address"] = f"http://{host}:{app.inspector.port}"
    text = f"listening on {app.address}"
    if "http_address" in doors:
        text += f"; HTTP/JSON on {doors['http_address']}"
    if "inspector_address" in doors:
        text += f"; inspector on {doors['inspector_address']}"
    return f"{text}; try `.venv/bin/wm demo` in a second terminal", doors


async def serve(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    app = await start_application(settings)
    # The one line a person starting the server needs: where it is and what to try next.
    line, doors = ready_line(app, settings)
    log.info(line, address=app.address, **doors)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutdown_requested")
    await app.stop()
