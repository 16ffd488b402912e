"""The scripted session: a week of migrating a payments ledger from MySQL to Postgres.

Why a scripted story rather than random text: a working memory is judged on whether the
details an engineer would need on Monday are still there, so the facts planted here are the
kind that get lost in practice: file paths, error records, open questions (some answered
later), dated and numbered decisions made by named people, and the session's title.

Every planted fact carries one or more *anchors*: distinctive strings that must still appear
in the working memory for the fact to count as kept. Anchors are unique across the whole
scenario (checked at import), so a fact cannot be counted as kept because another fact that
mentions the same name or number survived.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from wm_core import Message, Role, TextPart, ToolResultPart, ToolUsePart


class FactClass(StrEnum):
    """The kinds of planted facts, one per guarded section."""

    TITLE = "title"
    PATH = "paths"
    ERROR = "errors"
    ISSUE = "open issues"
    KEY_FACT = "key facts"


@dataclass(frozen=True, slots=True)
class Fact:
    """One planted fact: the item an honest model writes, and the strings that prove it is kept.

    ``topic`` groups key facts when an honest model consolidates them; ``paraphrase`` is what
    a model that rewrites the error history turns an error record into (without its anchor).
    """

    id: str
    cls: FactClass
    text: str
    anchors: tuple[str, ...]
    topic: str = ""
    paraphrase: str = ""


@dataclass(frozen=True, slots=True)
class ToolStep:
    """One tool call of the assistant and its result."""

    name: str
    input: dict[str, str]
    output: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Turn:
    """What happens between two commits: messages, and the facts they plant or resolve."""

    index: int
    when: str
    topic: str  # what a drifting model would retitle the session to
    user: str
    assistant: str
    state: str  # the Current State an honest model writes after this turn
    tool: ToolStep | None = None
    goals: tuple[str, ...] = ()
    facts: tuple[Fact, ...] = ()
    paths: tuple[Fact, ...] = ()
    errors: tuple[Fact, ...] = ()
    issues: tuple[Fact, ...] = ()
    resolves: tuple[str, ...] = ()  # ids of issues this turn resolves

    def planted(self) -> tuple[Fact, ...]:
        return self.facts + self.paths + self.errors + self.issues


@dataclass(frozen=True, slots=True)
class Scenario:
    """A title and the turns; each turn is committed on its own."""

    title: Fact
    turns: tuple[Turn, ...]
    facts: dict[str, Fact] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for turn in self.turns:
            for fact in turn.planted():
                self.facts[fact.id] = fact
        self.facts[self.title.id] = self.title

    def upto(self, count: int) -> Scenario:
        """The first ``count`` turns (for the smoke test)."""
        return Scenario(self.title, self.turns[:count])

    def planted_by(self, commit: int) -> list[Fact]:
        """Facts planted in turns 0..commit, without the issues resolved by then."""
        resolved = {rid for turn in self.turns[: commit + 1] for rid in turn.resolves}
        found: list[Fact] = [self.title]
        for turn in self.turns[: commit + 1]:
            found.extend(f for f in turn.planted() if f.id not in resolved)
        return found

    def resolved_by(self, commit: int) -> set[str]:
        return {rid for turn in self.turns[: commit + 1] for rid in turn.resolves}


def _fact(fid: str, topic: str, text: str, *anchors: str) -> Fact:
    return Fact(fid, FactClass.KEY_FACT, text, anchors, topic=topic)


def _path(fid: str, path: str, note: str) -> Fact:
    return Fact(fid, FactClass.PATH, f"`{path}` — {note}", (path,))


def _error(fid: str, text: str, anchor: str, paraphrase: str) -> Fact:
    return Fact(fid, FactClass.ERROR, text, (anchor,), paraphrase=paraphrase)


def _issue(fid: str, text: str, anchor: str) -> Fact:
    return Fact(fid, FactClass.ISSUE, text, (anchor,))


TEAM: Final = "Team"
SIZING: Final = "Sizing"
CUTOVER: Final = "Cutover plan"
SCHEMA: Final = "Schema"
POOLING: Final = "Connections"
SECURITY: Final = "Security"
FINANCE: Final = "Finance"
BACKFILL: Final = "Backfill"
TESTING: Final = "Testing"

TITLE: Final = Fact(
    "T01",
    FactClass.TITLE,
    "Harbor ledger migration from MySQL 5.7 to Postgres 16",
    ("Harbor ledger migration from MySQL 5.7 to Postgres 16",),
)

# -- key facts -----------------------------------------------------------------------------

K = {
    f.id: f
    for f in (
        _fact(
            "K01",
            TEAM,
            "Mei Lin is the product owner and makes the go/no-go call for the cutover",
            "go/no-go call",
        ),
        _fact(
            "K02",
            TEAM,
            "Priya Raman is the DBA on the migration; she is off on Thursday 2025-03-13",
            "Thursday 2025-03-13",
        ),
        _fact(
            "K03",
            SIZING,
            "The ledger database holds 1.8 TB in 412 tables; ledger_entries alone has 2.3 "
            "billion rows",
            "412 tables",
            "2.3 billion rows",
        ),
        _fact(
            "K04",
            CUTOVER,
            "Cutover window agreed with Mei Lin: Saturday 2025-03-22, 02:00-06:00 UTC",
            "2025-03-22",
            "02:00-06:00 UTC",
        ),
        _fact(
            "K05",
            CUTOVER,
            "Decided to copy the bulk with pgloader and catch up with Debezium CDC",
            "Debezium CDC",
        ),
        _fact(
            "K06",
            SCHEMA,
            "Money amounts move from DECIMAL(19,4) to numeric(20,4); never float",
            "numeric(20,4)",
        ),
        _fact(
            "K07",
            POOLING,
            "PgBouncer runs in transaction mode with default_pool_size 40 per app user",
            "default_pool_size 40",
        ),
        _fact(
            "K08",
            POOLING,
            "Postgres max_connections set to 400 after Priya's sizing (16 app pods x 20 plus "
            "headroom)",
            "max_connections set to 400",
            "16 app pods",
        ),
        _fact(
            "K09",
            SIZING,
            "New cluster is db.r6g.4xlarge (16 vCPU, 128 GiB) on 3 TB gp3 at 12000 IOPS",
            "db.r6g.4xlarge",
            "12000 IOPS",
        ),
        _fact(
            "K10",
            SCHEMA,
            "DATETIME values are read as Europe/Berlin local time and stored as timestamptz, "
            "agreed with Dmitri Volkov on 2025-03-11",
            "Europe/Berlin",
            "2025-03-11",
        ),
        _fact(
            "K11",
            SECURITY,
            "Jonas Weber requires encryption at rest with a customer-managed KMS key "
            "(alias/harbor-ledger-pg)",
            "alias/harbor-ledger-pg",
        ),
        _fact(
            "K12",
            FINANCE,
            "Aisha Okafor confirmed the February close snapshot must be kept for 7 years",
            "7 years",
        ),
        _fact(
            "K13",
            BACKFILL,
            "Backfill copies ledger_entries in chunks of 50000 rows ordered by entry_id",
            "50000 rows",
        ),
        _fact(
            "K14",
            BACKFILL,
            "Backfill workers raised from 4 to 12 on 2025-03-12 after the throughput test",
            "from 4 to 12",
            "2025-03-12",
        ),
        _fact(
            "K15",
            TESTING,
            "MySQL baseline: p99 write latency 38 ms at a 1,450 writes/s peak",
            "38 ms",
            "1,450 writes/s",
        ),
        _fact(
            "K16",
            TESTING,
            "Target on Postgres: p99 below 40 ms at 3x peak, i.e. 4,350 writes/s",
            "4,350 writes/s",
        ),
        _fact(
            "K17",
            CUTOVER,
            "MySQL goes read-only at 2025-03-21 18:00 UTC (freeze before the cutover)",
            "2025-03-21 18:00 UTC",
        ),
        _fact(
            "K18",
            SECURITY,
            "Only the ledger_migrator role may run DDL during the migration; it expires on "
            "2025-03-29",
            "ledger_migrator",
            "2025-03-29",
        ),
        _fact(
            "K19",
            FINANCE,
            "The daily close job must finish by 01:30 UTC, so the window cannot start before 02:00",
            "01:30 UTC",
        ),
        _fact(
            "K20",
            SCHEMA,
            "ledger_entries gets a BRIN index on created_at instead of a B-tree (saves ~140 GB)",
            "~140 GB",
        ),
        _fact(
            "K21",
            POOLING,
            "Server-side prepared statements are off in the JDBC reconciler (prepareThreshold=0) "
            "because of transaction pooling",
            "prepareThreshold=0",
        ),
        _fact(
            "K22",
            TEAM,
            "Luca Bianchi (SRE) is on call during the cutover; Tomas Ibarra is his backup",
            "Tomas Ibarra",
        ),
        _fact(
            "K23",
            BACKFILL,
            "Backfill measured at 27,800 rows/s with 12 workers: about 3 hours for ledger_entries",
            "27,800 rows/s",
        ),
        _fact(
            "K24",
            TESTING,
            "Staging load test at 3x peak with pool size 40: p99 31 ms, no errors",
            "p99 31 ms",
        ),
        _fact(
            "K25",
            CUTOVER,
            "Rollback means pointing the ledger DSN back at MySQL; possible until 2025-03-24 "
            "09:00 UTC, forward-fix only after that",
            "2025-03-24 09:00 UTC",
        ),
        _fact(
            "K26",
            FINANCE,
            "Reconciliation tolerance agreed with Aisha: zero cents difference per account",
            "zero cents difference",
        ),
        _fact(
            "K27",
            SECURITY,
            "Audit logs (pgaudit to CloudWatch) are retained for 400 days on the new cluster",
            "400 days",
            "pgaudit",
        ),
        _fact(
            "K28",
            SCHEMA,
            "Entry ids stay BIGINT; switching to UUID was rejected because of 23 downstream "
            "consumers",
            "23 downstream consumers",
        ),
        _fact(
            "K29",
            TEAM,
            "Grace Nakamura (QA) owns the reconciliation test plan, due 2025-03-18",
            "2025-03-18",
        ),
        _fact(
            "K30",
            TESTING,
            "Balance comparison covers all 1.2 million accounts, not a sample",
            "all 1.2 million accounts",
        ),
        _fact(
            "K31",
            CUTOVER,
            "The dual-write phase lasts 48 hours before reads switch to Postgres",
            "48 hours",
        ),
        _fact(
            "K32",
            POOLING,
            "The replica router reads from the replica only while lag < 500 ms, otherwise "
            "from the primary",
            "lag < 500 ms",
        ),
        _fact(
            "K33",
            FINANCE,
            "JPY has 0 decimals and KWD has 3; amounts are rounded half-even",
            "half-even",
        ),
        _fact(
            "K34",
            BACKFILL,
            "Checksums are sha256 over sorted (entry_id, amount), computed per 1 million rows",
            "per 1 million rows",
        ),
        _fact(
            "K35",
            SECURITY,
            "Database credentials rotate every 30 days through Vault",
            "every 30 days",
        ),
        _fact(
            "K36",
            CUTOVER,
            "Go/no-go meeting on Friday 2025-03-21 at 15:00 UTC with Mei Lin, Priya and Luca",
            "15:00 UTC",
        ),
        _fact(
            "K37",
            TESTING,
            "CI integration tests run against a postgres:16.2-alpine service container",
            "postgres:16.2-alpine",
        ),
        _fact(
            "K38",
            FINANCE,
            "The February month-end snapshot is taken on 2025-03-20 and archived to S3 Glacier",
            "S3 Glacier",
            "2025-03-20",
        ),
        _fact(
            "K39",
            SCHEMA,
            "The outbox is polled with SKIP LOCKED, batch 500, every 200 ms",
            "batch 500",
        ),
        _fact(
            "K40",
            TEAM,
            "Dmitri Volkov reviews every migration SQL file; 2 approvals are required",
            "2 approvals",
        ),
        _fact(
            "K41",
            POOLING,
            "PgBouncer max_client_conn is 2000 per node, 2 nodes behind the NLB",
            "max_client_conn is 2000",
        ),
        _fact(
            "K42",
            CUTOVER,
            "The cutover runbook has 47 steps; dry run #2 took 3 hours 40 minutes",
            "dry run #2",
            "3 hours 40 minutes",
        ),
        _fact(
            "K43",
            SIZING,
            "WAL volume peaked at 2.1 GB/min during the backfill; max_wal_size raised to 64GB",
            "max_wal_size raised to 64GB",
        ),
        _fact(
            "K44",
            SECURITY,
            "Penetration test of the new cluster booked with Nordsec for 2025-03-19",
            "Nordsec",
        ),
        _fact(
            "K45",
            FINANCE,
            "Aisha agreed that interest accruals may lag by one day after the cutover",
            "interest accruals",
        ),
        _fact(
            "K46",
            TESTING,
            "Dry run #3 on 2025-03-17 finished in 2 hours 55 minutes with zero mismatches",
            "dry run #3",
            "2 hours 55 minutes",
        ),
        _fact(
            "K47",
            SIZING,
            "The largest tenant, Brightwave, owns 31% of all ledger rows",
            "Brightwave",
        ),
        _fact(
            "K48",
            CUTOVER,
            "DNS TTL of ledger-db.internal lowered to 60 seconds on 2025-03-14",
            "60 seconds",
        ),
    )
}

# -- files ---------------------------------------------------------------------------------

P = {
    f.id: f
    for f in (
        _path("P01", "services/ledger/README.md", "service overview and ownership"),
        _path("P02", "services/ledger/app/repository.py", "all ledger writes go through here"),
        _path("P03", "services/ledger/db/schema.sql", "current MySQL schema"),
        _path("P04", "infra/terraform/rds_postgres16.tf", "the new Postgres 16 cluster"),
        _path("P05", "tools/pgloader/ledger.conf", "pgloader job for the bulk copy"),
        _path("P06", "services/ledger/db/pool.py", "application pool settings"),
        _path("P07", "deploy/pgbouncer/pgbouncer.ini", "PgBouncer config, transaction mode"),
        _path("P08", "services/ledger/migrations/0042_split_entries.sql", "timestamptz columns"),
        _path("P09", "scripts/backfill_entries.py", "chunked backfill of ledger_entries"),
        _path("P10", "services/ledger/tests/test_repository.py", "repository tests"),
        _path("P11", "services/ledger/app/money.py", "Money type and currency rounding"),
        _path("P12", "docs/runbooks/ledger_cutover.md", "the cutover runbook"),
        _path("P13", "deploy/k8s/ledger-worker.yaml", "backfill worker deployment"),
        _path("P14", "scripts/compare_balances.py", "per-account balance comparison"),
        _path("P15", "services/ledger/db/triggers.sql", "balance maintenance triggers"),
        _path("P16", "infra/terraform/kms_ledger.tf", "customer-managed KMS key"),
        _path("P17", "services/ledger/app/idempotency.py", "idempotency keys of postings"),
        _path("P18", "loadtest/k6/ledger_writes.js", "k6 write load test"),
        _path("P19", "services/ledger/config/settings.toml", "pool size and timeouts"),
        _path("P20", "services/reconcile/jobs/daily_close.py", "the daily close job"),
        _path("P21", "deploy/grafana/ledger_pg.json", "Grafana dashboard for the cluster"),
        _path("P22", "services/ledger/app/outbox.py", "transactional outbox relay"),
        _path("P23", "scripts/verify_checksums.sh", "chunk checksum verification"),
        _path("P24", "services/ledger/migrations/0043_entries_brin_index.sql", "BRIN index"),
        _path("P25", "ci/pipelines/ledger.yml", "CI pipeline of the ledger service"),
        _path("P26", "services/ledger/tests/test_money_rounding.py", "JPY/KWD rounding tests"),
        _path("P27", "docs/adr/0017-postgres-ledger.md", "ADR for the move to Postgres"),
        _path("P28", "deploy/pgbouncer/userlist.txt", "PgBouncer users (generated)"),
        _path("P29", "services/ledger/app/replica_router.py", "routes reads to the replica"),
        _path("P30", "scripts/rollback_to_mysql.sh", "rollback: DSN flip back to MySQL"),
    )
}

# -- errors and corrections ----------------------------------------------------------------

E = {
    f.id: f
    for f in (
        _error(
            "E01",
            "pgloader stopped on `invalid byte sequence for encoding UTF8: 0x92` in "
            "ledger_memos; fixed by declaring the source as cp1252",
            "0x92",
            "pgloader had an encoding problem with memos; fixed",
        ),
        _error(
            "E02",
            "Staging Postgres refused connections: `FATAL: remaining connection slots are "
            "reserved` (pods bypassed PgBouncer); fixed by routing all pods through PgBouncer",
            "remaining connection slots are reserved",
            "Ran out of database connections on staging; fixed",
        ),
        _error(
            "E03",
            "test_money_rounding failed with `AssertionError: 1000.005 != 1000.01`; "
            "money.py used ROUND_HALF_UP, switched to banker's rounding",
            "1000.005 != 1000.01",
            "A rounding test failed; rounding mode corrected",
        ),
        _error(
            "E04",
            "Reconciler failed with `prepared statement S_1 does not exist` behind PgBouncer; "
            "fixed by disabling server-side prepares in the JDBC URL",
            "prepared statement S_1 does not exist",
            "Prepared statements broke behind the pooler; fixed",
        ),
        _error(
            "E05",
            "Backfill re-run hit `duplicate key value violates unique constraint "
            "ledger_entries_pkey`; chunks now upsert with ON CONFLICT DO NOTHING",
            "ledger_entries_pkey",
            "The backfill produced duplicate keys on re-run; fixed",
        ),
        _error(
            "E06",
            "terraform apply failed: `InvalidParameterCombination` (gp3 IOPS below the 12000 "
            "minimum for 3 TB); set iops explicitly",
            "InvalidParameterCombination",
            "Terraform failed on a storage parameter; fixed",
        ),
        _error(
            "E07",
            "First staging load test breached the target: p99=212ms with pool size 10; "
            "raised the pool to 40",
            "p99=212ms",
            "The first load test was too slow; pool enlarged",
        ),
        _error(
            "E08",
            "compare_balances reported a mismatch on 37 accounts after the trial backfill",
            "mismatch on 37 accounts",
            "Some balances did not match after the trial backfill",
        ),
        _error(
            "E09",
            "Root cause of the mismatch: trigger compared `bigint = text` (implicit cast in "
            "MySQL, error in Postgres) and skipped updates; cast fixed in triggers.sql",
            "bigint = text",
            "A trigger type problem caused the mismatch; fixed",
        ),
        _error(
            "E10",
            "Wrong assumption corrected by Dmitri: I assumed amounts were stored in cents as "
            "BIGINT; they are DECIMAL(19,4) major units",
            "amounts were stored in cents",
            "A wrong assumption about amount storage was corrected",
        ),
        _error(
            "E11",
            "CI job ledger-it timed out after 45m because it started a MySQL container as well; "
            "removed it",
            "timed out after 45m",
            "The CI integration job was too slow; fixed",
        ),
        _error(
            "E12",
            "verify_checksums reported a sha256 mismatch in chunk 118 during the last dry run; the "
            "chunk was re-copied and matched",
            "chunk 118",
            "One checksum chunk mismatched in a dry run; re-copied",
        ),
        _error(
            "E13",
            "`deadlock detected` on outbox_events between the relay and the posting "
            "transaction; relay now locks rows in id order",
            "deadlock detected",
            "The outbox relay deadlocked; locking order fixed",
        ),
        _error(
            "E14",
            "Read-after-write returned a stale balance (replica lag 2.4 s); balance reads "
            "after a write now go to the primary",
            "replica lag 2.4 s",
            "A stale read came from the replica; fixed",
        ),
    )
}

# -- open issues ---------------------------------------------------------------------------

I = {  # noqa: E741 - issues, named like K, P and E
    f.id: f
    for f in (
        _issue(
            "I01",
            "Does finance need a frozen month-end snapshot before the cutover? (ask Aisha Okafor)",
            "frozen month-end snapshot",
        ),
        _issue(
            "I02",
            "How to map MySQL DATETIME columns without a time zone to timestamptz",
            "DATETIME columns without a time zone",
        ),
        _issue(
            "I03",
            "Transaction pooling may break server-side prepared statements in the Java reconciler",
            "Java reconciler",
        ),
        _issue(
            "I04",
            "Who signs off the rollback plan on the Postgres side, Priya or Luca?",
            "signs off the rollback plan",
        ),
        _issue(
            "I05",
            "Backfill runs at 9k rows/s; it needs about 25k rows/s to fit the window",
            "9k rows/s",
        ),
        _issue(
            "I06",
            "The KMS key rotation policy of the new cluster is not approved by Jonas yet",
            "KMS key rotation policy",
        ),
        _issue(
            "I07",
            "Rounding for JPY and KWD (0 and 3 decimals) is not covered by tests",
            "JPY and KWD",
        ),
        _issue(
            "I08",
            "The Grafana dashboard has no replication lag panel",
            "replication lag panel",
        ),
        _issue(
            "I09",
            "The load test at 3x peak on the staging cluster with production data is still "
            "to be repeated before go/no-go",
            "production data is still",
        ),
        _issue(
            "I10",
            "The outbox relay may double-publish events during the dual-write phase",
            "double-publish",
        ),
        _issue(
            "I11",
            "Decide whether MySQL stays available read-only for 14 days after the cutover",
            "read-only for 14 days",
        ),
        _issue(
            "I12",
            "The CI integration job still needs a Postgres service container",
            "still needs a Postgres service container",
        ),
        _issue(
            "I13",
            "Other read paths may still read stale data from the replica right after writes",
            "Other read paths",
        ),
        _issue(
            "I14",
            "Checksum verification is too slow for 1.8 TB (estimated 7 hours)",
            "estimated 7 hours",
        ),
    )
}

GOALS: Final = (
    "Migrate the Harbor ledger from MySQL 5.7 to Postgres 16 with no lost or duplicated postings",
    "Keep p99 write latency under 40 ms after the cutover",
    "Dry-run the cutover runbook at least twice before the go/no-go meeting",
    "Prove every account balance matches before reads switch to Postgres",
)


def _tool(name: str, output: str, error: bool = False, **inputs: str) -> ToolStep:
    return ToolStep(name, dict(inputs), output, error)


TURNS: Final = (
    Turn(
        0,
        "2025-03-10 09:05",
        "Harbor ledger migration kickoff",
        "Morning! This week we move the Harbor ledger from MySQL 5.7 to Postgres 16 and I "
        "want you on it with me. Start by reading the service README so we share the same "
        "picture.",
        "I read the README. Writes go through the repository module and the schema file "
        "describes the current MySQL layout. I'll keep a running list of what we decide.",
        "Kickoff done: scope understood, schema and write path located. Next: provision the "
        "Postgres 16 cluster.",
        _tool(
            "read_file",
            "# Ledger service\nOwns double-entry postings for Harbor Pay. Writes: "
            "app/repository.py. Schema: db/schema.sql (412 tables).",
            path="services/ledger/README.md",
        ),
        goals=(GOALS[0],),
        facts=(K["K01"], K["K03"]),
        paths=(P["P01"], P["P02"], P["P03"]),
        issues=(I["I01"],),
    ),
    Turn(
        1,
        "2025-03-10 09:50",
        "Provisioning the RDS Postgres 16 instance",
        "Let's get the cluster up. Priya sized it yesterday; apply the terraform in staging.",
        "The first apply failed on the storage parameters; after setting iops explicitly the "
        "staging cluster came up.",
        "Staging cluster provisioned after fixing the gp3 IOPS parameter.",
        _tool(
            "bash",
            "Error: creating RDS DB Instance: InvalidParameterCombination: you must specify "
            "iops >= 12000 for 3 TB gp3",
            True,
            command="terraform -chdir=infra/terraform apply -target=rds_postgres16",
        ),
        facts=(K["K09"],),
        paths=(P["P04"],),
        errors=(E["E06"],),
    ),
    Turn(
        2,
        "2025-03-10 10:40",
        "pgloader trial run and encoding errors",
        "Try a pgloader trial on the memos table first. For the catch-up we agreed to use CDC.",
        "The trial stopped on an encoding error in ledger_memos; declaring the source as cp1252 "
        "fixed it. One thing we have not decided is how DATETIME columns should be mapped.",
        "pgloader trial works on ledger_memos after the encoding fix; DATETIME mapping open.",
        _tool(
            "bash",
            "ERROR invalid byte sequence for encoding UTF8: 0x92 (table ledger_memos, row 88121)",
            True,
            command="pgloader tools/pgloader/ledger.conf",
        ),
        facts=(K["K05"],),
        paths=(P["P05"],),
        errors=(E["E01"],),
        issues=(I["I02"],),
    ),
    Turn(
        3,
        "2025-03-10 11:30",
        "Money column types and rounding",
        "Careful with money: Dmitri says amounts are DECIMAL(19,4) major units, not cents.",
        "Thanks, I had assumed cents in BIGINT. The Money type now maps to numeric(20,4). "
        "Rounding of zero- and three-decimal currencies has no tests yet.",
        "Money columns mapped to a wider numeric type; rounding tests missing.",
        _tool(
            "read_file",
            "class Money:\n    amount: Decimal  # major units, 4 decimals\n",
            path="services/ledger/app/money.py",
        ),
        facts=(K["K06"],),
        paths=(P["P11"],),
        errors=(E["E10"],),
        issues=(I["I07"],),
    ),
    Turn(
        4,
        "2025-03-10 13:20",
        "Connection pooling with PgBouncer",
        "Set up pooling. Priya wants transaction mode and a hard cap on server connections.",
        "PgBouncer is configured in transaction mode; the app pool settings were aligned.",
        "PgBouncer in transaction mode configured; app pool aligned with it.",
        _tool(
            "write_file",
            "wrote 38 lines",
            path="deploy/pgbouncer/pgbouncer.ini",
            content="[pgbouncer]\npool_mode = transaction\ndefault_pool_size = 40\n",
        ),
        facts=(K["K07"], K["K08"]),
        paths=(P["P06"], P["P07"]),
    ),
    Turn(
        5,
        "2025-03-10 14:15",
        "Connection slot exhaustion on staging",
        "Staging is throwing connection errors since lunch. Have a look?",
        "Some pods connected directly instead of through PgBouncer and used up the slots. All "
        "pods now go through PgBouncer. I am worried the Java reconciler uses server-side "
        "prepared statements.",
        "Connection errors on staging fixed; prepared statements in the reconciler to check.",
        _tool(
            "bash",
            "FATAL: remaining connection slots are reserved for non-replication superuser "
            "connections",
            True,
            command="kubectl logs deploy/ledger-api --since=1h | grep FATAL",
        ),
        facts=(K["K41"],),
        errors=(E["E02"],),
        issues=(I["I03"],),
    ),
    Turn(
        6,
        "2025-03-10 15:30",
        "Cutover window planning",
        "Mei Lin agreed the cutover window. Finance's daily close must be done first.",
        "Noted the window and the constraint from the daily close job.",
        "Cutover window fixed with Mei Lin; next: on-call roster.",
        goals=(GOALS[1],),
        facts=(K["K04"], K["K19"]),
    ),
    Turn(
        7,
        "2025-03-10 16:40",
        "On-call roster and rollback ownership",
        "Who is around during the cutover? Also, someone has to own the rollback decision.",
        "Roster noted. It is not clear yet who signs off the rollback plan on our side.",
        "Roster set; rollback sign-off owner open.",
        facts=(K["K02"], K["K22"]),
        issues=(I["I04"],),
    ),
    Turn(
        8,
        "2025-03-11 09:10",
        "DATETIME to timestamptz conversion",
        "Dmitri and I settled the DATETIME question this morning.",
        "Migration 0042 converts the columns using that rule; the DATETIME question is closed.",
        "DATETIME columns converted by migration 0042.",
        _tool(
            "write_file",
            "wrote 61 lines",
            path="services/ledger/migrations/0042_split_entries.sql",
        ),
        facts=(K["K10"],),
        paths=(P["P08"],),
        resolves=("I02",),
    ),
    Turn(
        9,
        "2025-03-11 10:00",
        "Encryption and DDL permissions",
        "Jonas from security sent his requirements for the new cluster.",
        "The KMS key is in terraform now. Jonas has not approved the key rotation policy yet.",
        "KMS key and DDL role in place; rotation policy awaiting Jonas.",
        _tool(
            "read_file", 'resource "aws_kms_key" "ledger" {}', path="infra/terraform/kms_ledger.tf"
        ),
        facts=(K["K11"], K["K18"]),
        paths=(P["P16"],),
        issues=(I["I06"],),
    ),
    Turn(
        10,
        "2025-03-11 11:20",
        "Backfill script for ledger entries",
        "Write the backfill for ledger_entries; it has to be restartable.",
        "The first re-run produced duplicate keys; chunks now upsert and the script can be "
        "restarted at any chunk.",
        "Restartable chunked backfill written.",
        _tool(
            "bash",
            "ERROR: duplicate key value violates unique constraint ledger_entries_pkey",
            True,
            command="python scripts/backfill_entries.py --resume",
        ),
        facts=(K["K13"],),
        paths=(P["P09"],),
        errors=(E["E05"],),
    ),
    Turn(
        11,
        "2025-03-11 13:30",
        "Backfill throughput and WAL volume",
        "How fast is the backfill? Watch WAL too.",
        "Throughput is too low for the window at the moment. WAL spiked; max_wal_size was raised.",
        "Backfill too slow for the window; WAL settings raised.",
        facts=(K["K43"],),
        issues=(I["I05"],),
    ),
    Turn(
        12,
        "2025-03-11 14:40",
        "Currency rounding tests",
        "Add the rounding tests for zero- and three-decimal currencies.",
        "The new test caught ROUND_HALF_UP in money.py; switched to half-even. Rounding is "
        "now covered.",
        "Rounding tests added and passing; repository tests updated.",
        _tool(
            "bash",
            "FAILED test_money_rounding.py::test_kwd_three_decimals - AssertionError: "
            "1000.005 != 1000.01",
            True,
            command="pytest services/ledger/tests/test_money_rounding.py",
        ),
        facts=(K["K33"],),
        paths=(P["P26"], P["P10"]),
        errors=(E["E03"],),
        resolves=("I07",),
    ),
    Turn(
        13,
        "2025-03-11 16:00",
        "Prepared statements behind PgBouncer",
        "The reconciler just failed in staging.",
        "As feared, prepared statements break behind transaction pooling. Disabled them in the "
        "JDBC URL.",
        "Reconciler works behind PgBouncer with prepared statements disabled.",
        _tool(
            "bash",
            "org.postgresql.util.PSQLException: ERROR: prepared statement S_1 does not exist",
            True,
            command="kubectl logs deploy/reconciler --since=30m",
        ),
        facts=(K["K21"],),
        errors=(E["E04"],),
    ),
    Turn(
        14,
        "2025-03-12 09:05",
        "Finance requirements for the cutover",
        "Aisha from finance answered our questions.",
        "Finance requirements noted; the snapshot question is answered.",
        "Finance requirements settled (snapshot, tolerance).",
        facts=(K["K12"], K["K26"], K["K38"]),
        resolves=("I01",),
    ),
    Turn(
        15,
        "2025-03-12 10:10",
        "Scaling the backfill workers",
        "Scale the backfill workers up and rerun.",
        "Workers scaled in the deployment manifest.",
        "Backfill workers scaled to 12.",
        _tool(
            "write_file",
            "wrote 12 lines",
            path="deploy/k8s/ledger-worker.yaml",
        ),
        facts=(K["K14"],),
        paths=(P["P13"],),
    ),
    Turn(
        16,
        "2025-03-12 11:00",
        "Write latency baseline and targets",
        "What is our latency baseline, and what is the target?",
        "Baseline measured on MySQL with the k6 script. We still have to repeat the 3x peak "
        "test on staging with production data.",
        "Latency baseline and target set; 3x peak test with production data pending.",
        _tool(
            "bash",
            "http_req_duration p(99)=38ms  rate=1450/s",
            command="k6 run loadtest/k6/ledger_writes.js --env TARGET=mysql",
        ),
        facts=(K["K15"], K["K16"]),
        paths=(P["P18"],),
        issues=(I["I09"],),
    ),
    Turn(
        17,
        "2025-03-12 13:00",
        "Outbox and idempotent postings",
        "Check idempotency and the outbox for the dual-write phase.",
        "Idempotency keys look fine. The outbox relay could publish twice while both databases "
        "are written.",
        "Outbox reviewed; duplicate events possible during dual-write.",
        _tool("read_file", "class OutboxRelay: ...", path="services/ledger/app/outbox.py"),
        facts=(K["K39"],),
        paths=(P["P17"], P["P22"]),
        issues=(I["I10"],),
    ),
    Turn(
        18,
        "2025-03-12 14:30",
        "Dual-write phase and dashboards",
        "How long do we dual-write? And is the dashboard ready?",
        "Dual-write duration agreed. The dashboard is missing a replication lag panel.",
        "Dual-write plan fixed; dashboard incomplete.",
        _tool("read_file", '{"panels": [...]}', path="deploy/grafana/ledger_pg.json"),
        facts=(K["K31"],),
        paths=(P["P21"],),
        issues=(I["I08"],),
    ),
    Turn(
        19,
        "2025-03-12 16:10",
        "Backfill speed and checksum design",
        "Rerun the backfill with 12 workers and design the checksum check.",
        "Throughput is now enough for the window. Checksums designed, but verification is slow.",
        "Backfill fits the window; checksum verification too slow.",
        _tool(
            "bash",
            "rows/s=27800 eta=3h02m",
            command="python scripts/backfill_entries.py --workers 12",
        ),
        facts=(K["K23"], K["K34"]),
        paths=(P["P23"],),
        issues=(I["I14"],),
        resolves=("I05",),
    ),
    Turn(
        20,
        "2025-03-13 09:20",
        "Balance comparison across 1.2 million accounts",
        "Compare balances on every account after the trial backfill.",
        "The comparison found mismatches; looking for the cause next.",
        "Balance mismatches found after the trial backfill; root cause next.",
        _tool(
            "bash",
            "MISMATCH accounts=37 total_diff=1214.5500",
            True,
            command="python scripts/compare_balances.py --all",
        ),
        facts=(K["K30"],),
        paths=(P["P14"],),
        errors=(E["E08"],),
    ),
    Turn(
        21,
        "2025-03-13 10:30",
        "Fixing the balance mismatch trigger",
        "Any idea why 37 accounts differ?",
        "A trigger compared bigint to text; MySQL cast silently, Postgres raised and the "
        "update was skipped. Fixed. CI still runs on MySQL only, though.",
        "Mismatch root cause fixed in the triggers; CI lacks Postgres.",
        _tool(
            "read_file",
            "IF NEW.account_id = OLD.account_ref THEN ...",
            path="services/ledger/db/triggers.sql",
        ),
        facts=(K["K28"],),
        paths=(P["P15"],),
        errors=(E["E09"],),
        issues=(I["I12"],),
    ),
    Turn(
        22,
        "2025-03-13 11:45",
        "Rollback plan to MySQL",
        "Write the rollback script. Luca will sign off the rollback plan.",
        "Rollback script written; Luca owns the sign-off, so that question is closed.",
        "Rollback script ready; sign-off owner settled.",
        _tool("write_file", "wrote 44 lines", path="scripts/rollback_to_mysql.sh"),
        facts=(K["K25"], K["K29"]),
        paths=(P["P30"],),
        resolves=("I04",),
    ),
    Turn(
        23,
        "2025-03-13 13:30",
        "Cutover runbook review",
        "Review the runbook with me and put the go/no-go meeting in it.",
        "Runbook reviewed after dry run #2.",
        "Runbook reviewed; go/no-go meeting scheduled.",
        _tool(
            "read_file",
            "# Ledger cutover runbook (47 steps)",
            path="docs/runbooks/ledger_cutover.md",
        ),
        goals=(GOALS[2],),
        facts=(K["K42"], K["K36"]),
        paths=(P["P12"],),
    ),
    Turn(
        24,
        "2025-03-13 15:00",
        "Audit logging and credential rotation",
        "Jonas came back with the audit and credential requirements.",
        "Audit logging and credential rotation configured; pen test booked.",
        "Security requirements configured; pen test booked.",
        facts=(K["K27"], K["K35"], K["K44"]),
    ),
    Turn(
        25,
        "2025-03-13 16:20",
        "CI pipeline on Postgres 16",
        "Make CI run the integration tests on Postgres.",
        "The job timed out while it still started MySQL too; now it only starts Postgres and "
        "passes. The CI question is closed.",
        "CI integration job runs on Postgres.",
        _tool(
            "bash",
            "job ledger-it: timed out after 45m",
            True,
            command="ci run ci/pipelines/ledger.yml --job ledger-it",
        ),
        facts=(K["K37"],),
        paths=(P["P25"],),
        errors=(E["E11"],),
        resolves=("I12",),
    ),
    Turn(
        26,
        "2025-03-14 09:00",
        "BRIN index for ledger_entries",
        "The B-tree on created_at is huge. Alternatives?",
        "Migration 0043 replaces it with a BRIN index.",
        "BRIN index migration written.",
        _tool(
            "write_file",
            "wrote 9 lines",
            path="services/ledger/migrations/0043_entries_brin_index.sql",
        ),
        facts=(K["K20"], K["K47"]),
        paths=(P["P24"],),
    ),
    Turn(
        27,
        "2025-03-14 10:15",
        "Staging load test at 3x peak",
        "Run the 3x peak load test on staging.",
        "The first run was far too slow with pool size 10; with 40 it meets the target.",
        "Staging load test passes at 3x peak with pool size 40.",
        _tool(
            "bash",
            "http_req_duration p(99)=212ms (threshold 40ms) FAILED",
            True,
            command="k6 run loadtest/k6/ledger_writes.js --env TARGET=staging-pg",
        ),
        facts=(K["K24"],),
        paths=(P["P19"],),
        errors=(E["E07"],),
    ),
    Turn(
        28,
        "2025-03-14 11:40",
        "Replica routing and stale reads",
        "A customer saw an old balance right after a transfer in staging.",
        "Balance reads after a write now go to the primary. Other read paths may have the "
        "same problem.",
        "Stale balance read fixed; remaining read paths to audit.",
        _tool(
            "read_file",
            "def route(query): ...",
            path="services/ledger/app/replica_router.py",
        ),
        facts=(K["K32"],),
        paths=(P["P29"],),
        errors=(E["E14"],),
        issues=(I["I13"],),
    ),
    Turn(
        29,
        "2025-03-14 14:00",
        "Outbox deadlock fix",
        "We are seeing deadlocks in the outbox under load.",
        "The relay now locks rows in id order. ADR written for the move.",
        "Outbox deadlock fixed; ADR 0017 written.",
        _tool("write_file", "wrote 120 lines", path="docs/adr/0017-postgres-ledger.md"),
        facts=(K["K40"],),
        paths=(P["P27"],),
        errors=(E["E13"],),
    ),
    Turn(
        30,
        "2025-03-14 15:30",
        "DNS TTL and MySQL freeze",
        "Lower the DNS TTL today and confirm when MySQL freezes.",
        "TTL lowered and the freeze time confirmed. Still open: keep MySQL read-only for a "
        "while after the cutover?",
        "DNS TTL lowered, freeze time confirmed; post-cutover MySQL retention open.",
        goals=(GOALS[3],),
        facts=(K["K48"], K["K17"]),
        issues=(I["I11"],),
    ),
    Turn(
        31,
        "2025-03-17 09:30",
        "Third dry run results",
        "Dry run #3 finished over the weekend. Results?",
        "All steps passed; one checksum chunk had to be re-copied. Finance agreed on the "
        "accrual lag.",
        "Third dry run passed; ready for the go/no-go meeting on 2025-03-21.",
        _tool(
            "bash",
            "sha256 mismatch chunk=118; re-copy ok; 47/47 steps done in 2h55m",
            command="bash scripts/verify_checksums.sh --run dry3",
        ),
        facts=(K["K46"], K["K45"]),
        paths=(P["P20"], P["P28"]),
        errors=(E["E12"],),
    ),
)

SCENARIO: Final = Scenario(TITLE, TURNS)


def _check(scenario: Scenario) -> None:
    """Anchors must be findable and unique, or the retention figures would lie."""
    problems: list[str] = []
    texts = {fact.id: fact.text for fact in scenario.facts.values()}
    # What an honest model writes besides the planted items must not carry an anchor either.
    others = [*GOALS, *(t.state for t in scenario.turns), *(t.topic for t in scenario.turns)]
    others.extend(f.paraphrase for f in scenario.facts.values() if f.paraphrase)
    for fact in scenario.facts.values():
        for anchor in fact.anchors:
            owners = [fid for fid, text in texts.items() if anchor.lower() in text.lower()]
            if owners != [fact.id]:
                problems.append(f"anchor {anchor!r} of {fact.id} occurs in {owners}")
            if fact.cls != FactClass.TITLE and any(anchor.lower() in o.lower() for o in others):
                problems.append(f"anchor {anchor!r} of {fact.id} occurs outside its fact")
        if " | " in fact.text:
            problems.append(f"{fact.id} contains the consolidation separator")
    for index, turn in enumerate(scenario.turns):
        if turn.index != index:
            problems.append(f"turn {index} is numbered {turn.index}")
    if problems:
        raise AssertionError("; ".join(problems))


_check(SCENARIO)

# -- the long session: 100 commits, three new key facts each -----------------------------------

LONG_COMMITS: Final = 100
LONG_FACTS_PER_COMMIT: Final = 3
FOLLOW_UPS: Final = "Post-cutover follow-ups"
_PEOPLE: Final = ("Mei Lin", "Priya Raman", "Tomasz Nowak", "Aiko Sato", "Rafael Costa")
_SETTINGS: Final = (
    ("statement_timeout", "ms", 250),
    ("lock_timeout", "ms", 40),
    ("work_mem", "MB", 8),
    ("autovacuum_vacuum_scale_factor", "thousandths", 3),
    ("max_parallel_workers_per_gather", "workers", 1),
    ("checkpoint_timeout", "s", 60),
)
_TABLES: Final = ("ledger_entries", "journal_lines", "payouts", "accounts", "fx_rates", "holds")


def _follow_up(n: int) -> Fact:
    """The n-th key fact after the cutover: who set which setting on which table, and
    under which ticket (the ticket number is the anchor, unique by construction)."""
    setting, unit, base = _SETTINGS[n % len(_SETTINGS)]
    table = _TABLES[(n // len(_SETTINGS)) % len(_TABLES)]
    who = _PEOPLE[n % len(_PEOPLE)]
    ticket = f"HLM-{4000 + n}"
    text = f"{who} set {setting} on {table} to {base * (n % 7 + 1)} {unit} under {ticket}"
    return _fact(f"L{n:03d}", FOLLOW_UPS, text, ticket)


def _long_turn(index: int) -> Turn:
    """One follow-up commit of the long session (a day has ten of them)."""
    day, hour = divmod(index - len(TURNS), 10)
    date = datetime.date(2025, 3, 18) + datetime.timedelta(days=day)
    first = (index - len(TURNS)) * LONG_FACTS_PER_COMMIT
    facts = tuple(_follow_up(first + k) for k in range(LONG_FACTS_PER_COMMIT))
    return Turn(
        index,
        f"{date.isoformat()} {8 + hour:02d}:15",
        "Post-cutover tuning",
        "Next round of tuning after the cutover; write down what we changed.",
        "Done; the settings are applied and noted.",
        f"Post-cutover tuning, round {index - len(TURNS) + 1}: settings applied.",
        facts=facts,
    )


# The session of the "never consolidates" behavior: the scripted week, then 68 commits of
# follow-ups, so that a model which only ever appends fills Key Facts far past its budget.
LONG_SCENARIO: Final = Scenario(
    TITLE, TURNS + tuple(_long_turn(i) for i in range(len(TURNS), LONG_COMMITS))
)
_check(LONG_SCENARIO)

# The session of "never consolidates over 200 commits" (issue 36): the same follow-ups for
# 168 commits, so that Key Facts stays at its emergency bound for most of the session.
VERY_LONG_COMMITS: Final = 200
VERY_LONG_SCENARIO: Final = Scenario(
    TITLE, TURNS + tuple(_long_turn(i) for i in range(len(TURNS), VERY_LONG_COMMITS))
)
_check(VERY_LONG_SCENARIO)

# -- messages ------------------------------------------------------------------------------


def message_id(turn: int, n: int) -> str:
    """Ids carry the turn number: ``c07-2`` is the second message of turn 7."""
    return f"c{turn:02d}-{n}"


def turn_of(message_id_: str) -> int | None:
    """The turn number of a scripted message id, or None for a foreign id."""
    digits, dash, _ = message_id_[1:].partition("-")  # "c07-2", and "c123-2" past 99
    if message_id_[:1] == "c" and dash and len(digits) >= 2 and digits.isdigit():
        return int(digits)
    return None


def _user_text(turn: Turn) -> str:
    parts = [f"[{turn.when}] {turn.user}"]
    parts.extend(f"{fact.text}." for fact in turn.facts)
    return " ".join(parts)


def _assistant_text(turn: Turn, scenario: Scenario) -> str:
    lines = [turn.assistant]
    lines.extend(f"Touched {fact.text}" for fact in turn.paths)
    lines.extend(f"Error: {fact.text}" for fact in turn.errors)
    lines.extend(f"Open question: {fact.text}" for fact in turn.issues)
    lines.extend(f"Resolved: {scenario.facts[rid].text}" for rid in turn.resolves)
    return "\n".join(lines)


def core_messages(turn: Turn, scenario: Scenario = SCENARIO) -> list[Message]:
    """The turn's messages as the engine sees them (the Phase 2 provider receives these)."""
    messages = [Message(message_id(turn.index, 1), Role.USER, (TextPart(_user_text(turn)),))]
    if turn.tool is not None:
        call_id = f"toolu_{turn.index:02d}"
        use = ToolUsePart(call_id, turn.tool.name, json.dumps(turn.tool.input))
        result = ToolResultPart(call_id, turn.tool.output, turn.tool.is_error)
        messages.append(Message(message_id(turn.index, 2), Role.ASSISTANT, (use,)))
        messages.append(Message(message_id(turn.index, 3), Role.USER, (result,)))
    text = _assistant_text(turn, scenario)
    messages.append(Message(message_id(turn.index, 4), Role.ASSISTANT, (TextPart(text),)))
    return messages
