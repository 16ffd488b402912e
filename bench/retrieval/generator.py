"""Generated multi-session conversations with planted facts, and questions about them.

Why generated rather than scripted: a retrieval figure over a dozen hand-written questions
says little, and one over a public corpus would measure someone else's data. The generator is
seeded, so the same arguments give the same conversations, byte for byte.

Each user has several sessions of coding-assistant work. Most turns are filler: requests and
answers about the work, and tool exchanges (a shell command and its output) whose words
overlap the questions' vocabulary, as real sessions do. Buried among them are *planted facts*
of four kinds: preferences, decisions with their reason, dated events and entities (people,
teams, systems). Every planted fact comes with a natural question asked later, worded the way
someone would ask it weeks on: synonyms ("deploys" / "releases"), another word order, a few
shared words at most, never the evidence sentence itself. A question's *evidence* is the id
of the message that states the fact.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

# -- what is planted -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """One message: text, or a tool call (``tool`` and ``tool_input``) or its result."""

    id: str
    role: str  # "user" | "assistant"
    text: str = ""
    tool: str = ""
    tool_input: str = ""  # JSON
    tool_output: str = ""
    call_id: str = ""


@dataclass(frozen=True, slots=True)
class Question:
    """A question about one planted fact, and the messages that state it."""

    id: str
    user: str
    kind: str  # preference | decision | event | entity
    text: str
    evidence: tuple[str, ...]


@dataclass(slots=True)
class Session:
    """One session of one user, committed in ``batches`` (lists of messages)."""

    id: str
    user: str
    batches: list[list[Message]] = field(default_factory=list)

    @property
    def messages(self) -> list[Message]:
        return [m for batch in self.batches for m in batch]


@dataclass(slots=True)
class Dataset:
    seed: int
    sessions: list[Session]
    questions: list[Question]

    def users(self) -> list[str]:
        return list(dict.fromkeys(s.user for s in self.sessions))


# -- templates -------------------------------------------------------------------------------
# A template is (kind, evidence, question, slots): the evidence and the question are format
# strings over the same slots; a slot maps to (value in the evidence, value in the question),
# so the question can name a thing by a synonym.

Slot = dict[str, tuple[str, str]]

_AREAS: Final = (
    ("billing", "invoicing"),
    ("search", "lookup"),
    ("reporting", "analytics"),
    ("onboarding", "sign-up"),
    ("notifications", "alerts"),
    ("payments", "checkout"),
)
_LANGS: Final = (("Go", "Go"), ("Rust", "Rust"), ("Kotlin", "Kotlin"), ("TypeScript", "TypeScript"))
_COMPONENTS: Final = (
    ("ledger", "ledger"),
    ("session store", "session storage"),
    ("job queue", "task queue"),
    ("audit log", "audit trail"),
    ("feature flags", "feature toggles"),
    ("image cache", "thumbnail cache"),
)
_TARGETS: Final = ("Postgres", "Redis", "S3", "Kafka", "DynamoDB", "ClickHouse")
_REASONS: Final = (
    "the nightly batch kept timing out on the old cluster",
    "the licence costs tripled this year",
    "replication lag broke read-after-write for customers",
    "nobody on the team could operate the old system any more",
    "the vendor announced end of support for next spring",
    "backups took nine hours and failed twice",
)
_LIBS: Final = (
    ("requests", "httpx", "we need async and HTTP/2"),
    ("moment.js", "date-fns", "the bundle was 300 kB heavier than it needed to be"),
    ("Jenkins", "GitHub Actions", "the build agents were a security liability"),
    ("Celery", "Dramatiq", "workers deadlocked under memory pressure"),
    ("Mocha", "Vitest", "the test suite took eleven minutes"),
    ("Flask", "FastAPI", "we want typed request models"),
)
_WEEKDAYS: Final = (("Friday", "Friday"), ("Thursday", "Thursday"), ("Monday", "Monday"))
_PEOPLE: Final = (
    "Amara Okafor",
    "Lukas Brandt",
    "Sofia Marquez",
    "Kenji Watanabe",
    "Nadia Haddad",
    "Oskar Lindqvist",
    "Priyanka Rao",
    "Mateo Rossi",
)
_ROLES: Final = (
    ("SRE", "site reliability engineer"),
    ("designer", "product designer"),
    ("data engineer", "data engineer"),
    ("tech lead", "technical lead"),
)
_VENDORS: Final = ("Stripe", "Twilio", "Datadog", "Auth0", "Cloudflare", "Sentry")
_TOPICS: Final = (
    ("rate-limit", "throttling"),
    ("billing", "invoice"),
    ("outage", "incident"),
    ("SSO", "single sign-on"),
)
_SYSTEMS: Final = (
    ("checkout API", "checkout service"),
    ("login service", "authentication service"),
    ("webhook relay", "webhook forwarder"),
    ("search indexer", "indexing pipeline"),
)
_MONTHS: Final = ("January", "February", "March", "April", "May", "June", "September", "October")
_CODENAMES: Final = ("Bluejay", "Kestrel", "Marmot", "Osprey", "Tamarin", "Wombat")
_REGIONS: Final = (
    ("eu-west-1", "Ireland"),
    ("us-east-2", "Ohio"),
    ("ap-southeast-2", "Sydney"),
)
_TEAMS: Final = ("Platform", "Growth", "Payments", "Data", "Identity")
_SERVICES: Final = (
    ("ledger-writer", "the ledger writer"),
    ("mailer", "the email sender"),
    ("pricing-engine", "the pricing engine"),
    ("geo-resolver", "the geolocation lookup"),
)
_PAGERS: Final = ("PagerDuty", "Opsgenie", "the #oncall channel")
_CHANNELS: Final = ("team-updates", "standup", "eng-daily")
_EDITORS: Final = (("Vim", "vi"), ("Emacs", "Emacs"), ("Helix", "Helix"))


def _slots(rng: random.Random, kind: str, variant: int) -> tuple[str, str]:
    """One planted fact of ``kind``: (the evidence sentence, the question)."""
    pick = rng.choice
    if kind == "preference":
        if variant == 0:
            area, area_q = pick(_AREAS)
            lang, alt = rng.sample([lang for lang, _ in _LANGS], 2)
            return (
                f"For anything that touches the {area} code I prefer {lang} over {alt}, "
                "please keep that in mind.",
                f"Which programming language do I favour for the {area_q} work?",
            )
        if variant == 1:
            n = pick((50, 60, 72))
            return (
                "Please always write commit messages in the imperative mood, with a subject "
                f"line under {n} characters.",
                "How should my commit messages be phrased?",
            )
        if variant == 2:
            channel = pick(_CHANNELS)
            return (
                f"I like standups async: just post a written update in #{channel} instead "
                "of a call.",
                "How do I want the daily stand-up meeting to happen?",
            )
        if variant == 3:
            tool = pick(("pytest", "jest", "cargo test"))
            return (
                f"Keep {tool} output terse: I only want to see failures, never the passing lines.",
                "What should the test runner print when it runs for me?",
            )
        editor, editor_q = pick(_EDITORS)
        return (
            f"I use {editor} keybindings everywhere, notebooks included, so set that up for me.",
            f"Which editor key bindings do I want configured ({editor_q} or something else)?",
        )
    if kind == "decision":
        if variant in (0, 1):
            component, component_q = pick(_COMPONENTS)
            target, reason = pick(_TARGETS), pick(_REASONS)
            question = (
                f"Why was the {component_q} migrated to {target}?"
                if variant == 0
                else f"When and why did we decide to put the {component_q} on {target}?"
            )
            return (f"We decided to move the {component} to {target} because {reason}.", question)
        if variant == 2:
            old, new, reason = pick(_LIBS)
            return (
                f"Final call: we drop {old} and use {new} instead, since {reason}.",
                f"What did we replace {old} with, and for what reason?",
            )
        day, _ = pick(_WEEKDAYS)
        return (
            f"Agreed: no deploys on {day}s from now on, too many incidents landed right before "
            "people logged off.",
            "Is there a day of the week when we don't ship releases?",
        )
    if kind == "event":
        month = pick(_MONTHS)
        day = rng.randint(2, 27)
        if variant in (0, 1):
            system, system_q = pick(_SYSTEMS)
            minutes = rng.randint(12, 95)
            return (
                f"The {system} outage on {month} {day} lasted {minutes} minutes; the root cause "
                "was an expired TLS certificate.",
                f"What caused the downtime of the {system_q} back in {month}?",
            )
        if variant == 2:
            person = pick(_PEOPLE)
            role, role_q = pick(_ROLES)
            return (
                f"{person} joins us on {month} {day} as our new {role}.",
                f"When does the new {role_q} start?",
            )
        vendor = pick(_VENDORS)
        notice = pick((30, 60, 90))
        return (
            f"Our contract with {vendor} renews on {month} {day}, with a {notice}-day notice "
            "period.",
            f"By what date do we have to tell {vendor} if we want to cancel?",
        )
    # entity
    if variant in (0, 1):
        person, vendor = pick(_PEOPLE), pick(_VENDORS)
        topic, topic_q = pick(_TOPICS)
        return (
            f"{person} is our account contact at {vendor}; she handles {topic} escalations.",
            f"Who should I reach out to at {vendor} about a {topic_q} problem?",
        )
    if variant == 2:
        codename = pick(_CODENAMES)
        region, region_q = pick(_REGIONS)
        return (
            f"The staging cluster is called {codename} and runs in {region}.",
            f"What's the name of the pre-production environment in {region_q}?",
        )
    service, service_q = pick(_SERVICES)
    team, pager = pick(_TEAMS), pick(_PAGERS)
    return (
        f"{service} belongs to the {team} team; page them through {pager}.",
        f"Which team owns {service_q}?",
    )


KINDS: Final = ("preference", "decision", "event", "entity")
_VARIANTS: Final = {"preference": 5, "decision": 4, "event": 4, "entity": 4}

# -- filler ----------------------------------------------------------------------------------

_FILLER_ASKS: Final = (
    "Can you run the linter again on the {area} module?",
    "The {area} tests are flaky again, take a look.",
    "Let's refactor the {area} handler, it has grown too long.",
    "Please bump the dependencies of the {area} service.",
    "What does the deploy script do before it restarts the {area} workers?",
    "Add a retry around the {area} client, it times out now and then.",
    "Write a migration that adds an index on the {area} table.",
    "Review the pull request for the {area} changes, please.",
)
_FILLER_ANSWERS: Final = (
    "Done. {n} warnings left, all in generated code.",
    "Fixed: the test relied on the wall clock; it now uses a frozen time.",
    "I split it into three functions and kept the behaviour identical.",
    "Bumped {n} packages; the changelog shows nothing breaking.",
    "It drains the queue, runs the migrations and then restarts the workers one by one.",
    "Added exponential backoff with {n} attempts and a jittered delay.",
    "The migration adds the index concurrently so the release does not lock the table.",
    "Two comments on naming, otherwise it looks good to merge.",
)
_COMMANDS: Final = (
    ("bash", "pytest -q tests/{area}", "{n} passed, 1 skipped in 4.2s"),
    ("bash", "git log --oneline -5", "a1b2c3d fix {area} retry\\n9f8e7d6 bump deps"),
    ("bash", "kubectl get pods -n {area}", "{area}-worker-0   Running   0   3d"),
    ("read_file", "services/{area}/config.yaml", "timeout: {n}s\\nretries: 3\\nregion: default"),
    ("bash", "grep -rn TODO services/{area}", "services/{area}/handler.py:{n}: TODO: review"),
)


def _filler(rng: random.Random, ids: _Ids, area: str) -> list[Message]:
    """A filler exchange: a request and its answer, often with a tool call in between."""
    n = rng.randint(2, 40)
    ask = rng.choice(_FILLER_ASKS).format(area=area)
    messages = [Message(ids.next(), "user", ask)]
    if rng.random() < 0.6:
        tool, command, output = rng.choice(_COMMANDS)
        call = f"toolu_{ids.count:04d}"
        key = "path" if tool == "read_file" else "command"
        command = command.format(area=area, n=n)
        messages.append(
            Message(
                ids.next(), "assistant", tool=tool, tool_input=f'{{"{key}": "{command}"}}',
                call_id=call,
            )
        )  # fmt: skip
        messages.append(
            Message(ids.next(), "user", tool_output=output.format(area=area, n=n), call_id=call)
        )
    messages.append(Message(ids.next(), "assistant", rng.choice(_FILLER_ANSWERS).format(n=n)))
    return messages


class _Ids:
    """Message ids of one session: ``u1-s2-m007``."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.count = 0

    def next(self) -> str:
        self.count += 1
        return f"{self.session}-m{self.count:03d}"


_ACKS: Final = (
    "Noted.",
    "Got it, I'll keep that in mind.",
    "Understood.",
    "Okay, noted for later.",
)


def generate(
    seed: int = 20261201,
    *,
    users: int = 6,
    sessions_per_user: int = 4,
    facts_per_session: int = 8,
    fillers_per_fact: int = 3,
    batches_per_session: int = 2,
) -> Dataset:
    """The dataset for these arguments (the same arguments, the same dataset)."""
    rng = random.Random(seed)
    sessions: list[Session] = []
    questions: list[Question] = []
    for u in range(1, users + 1):
        user = f"user-{u}"
        seen: set[str] = set()  # one user never gets the same fact twice
        for s in range(1, sessions_per_user + 1):
            session = Session(f"u{u}-s{s}", user)
            ids = _Ids(session.id)
            blocks: list[list[Message]] = []  # exchanges: a batch never splits one
            for _ in range(facts_per_session):
                area = rng.choice(_AREAS)[0]
                for _ in range(rng.randint(1, fillers_per_fact)):
                    blocks.append(_filler(rng, ids, area))
                asked = {q.text for q in questions}
                for _ in range(50):  # a fact its user has not had, a question not yet asked
                    kind = rng.choice(KINDS)
                    evidence, question = _slots(rng, kind, rng.randrange(_VARIANTS[kind]))
                    if evidence not in seen and question not in asked:
                        break
                else:
                    continue  # the templates are used up for this user: plant nothing
                seen.add(evidence)
                if rng.random() < 0.25:  # a fact the assistant states, e.g. a summary
                    blocks.append([Message(ids.next(), "user", "Summarize what we settled.")])
                    said = ids.next()
                    blocks[-1].append(Message(said, "assistant", f"To summarize: {evidence}"))
                else:
                    said = ids.next()
                    blocks.append([Message(said, "user", evidence)])
                    blocks[-1].append(Message(ids.next(), "assistant", rng.choice(_ACKS)))
                questions.append(
                    Question(f"q{len(questions) + 1:03d}", user, kind, question, (said,))
                )
            for _ in range(rng.randint(1, fillers_per_fact)):
                blocks.append(_filler(rng, ids, rng.choice(_AREAS)[0]))
            size = -(-len(blocks) // batches_per_session)
            session.batches = [
                [m for block in blocks[i : i + size] for m in block]
                for i in range(0, len(blocks), size)
            ]
            sessions.append(session)
    return Dataset(seed, sessions, questions)
