"""Generated multi-session personal chats (family, hobbies, travel, health) with dated facts,
and paraphrased questions of four kinds whose evidence turns are annotated.

Why a second generator beside ``bench/retrieval/generator.py`` (coding sessions): questions
asked of an agent's past are often about a person's life, not their code, with dates and with
answers that need two turns from two sessions. The kinds:

- ``single``: one turn states the answer ("Which city does my sibling live in now?").
- ``multi_hop``: two turns, in different sessions, each hold half ("What does my
  sister-in-law do?" needs "my brother married Ines" and "Ines works as a midwife").
- ``temporal``: the answer is a date the turn states.
- ``open``: an opinion or plan, asked about in general words.

Every template belongs to exactly one split: ``dev`` (tune on it) or ``heldout`` (never tune
on it), so a setting chosen on dev is checked on wordings and facts it has not seen. Questions
are paraphrases: synonyms, other word order, few shared words, never the evidence sentence.
Seeded: the same arguments give the same conversations, byte for byte.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from bench.retrieval.generator import Dataset, Message, Question, Session

KINDS: Final = ("single", "multi_hop", "temporal", "open")
SPLITS: Final = ("dev", "heldout")

_NAMES: Final = ("Lena", "Ines", "Marta", "Chloe", "Yara", "Hanna", "Rosa", "Freya", "Mila")
_MEN: Final = ("Tomas", "Bruno", "Elias", "Karim", "Felix", "Rafael", "Jonas", "Ivan")
_CITIES: Final = (
    ("Lisbon", "Portugal"),
    ("Utrecht", "the Netherlands"),
    ("Valencia", "Spain"),
    ("Krakow", "Poland"),
    ("Porto", "Portugal"),
    ("Ghent", "Belgium"),
)
_MONTHS: Final = ("January", "February", "March", "April", "May", "June", "July", "September")
_DOGS: Final = (("beagle", "hound"), ("border collie", "sheepdog"), ("dachshund", "sausage dog"))
_FOODS: Final = (("peanuts", "nuts"), ("shellfish", "seafood"), ("sesame", "sesame seeds"))
_AUTHORS: Final = ("Elena Ferrante", "Sally Rooney", "Ursula Le Guin", "Olga Tokarczuk")
_CARS: Final = (("Skoda Octavia estate", "station wagon"), ("Honda Jazz", "small hatchback"))
_INSTRUMENTS: Final = (("cello", "string"), ("clarinet", "woodwind"), ("trumpet", "brass"))
_HOBBIES: Final = (
    ("pottery", "ceramics"),
    ("salsa", "Latin dance"),
    ("watercolour", "painting"),
    ("climbing", "bouldering"),
    ("Italian cookery", "cooking"),
)
_COMPANIES: Final = ("Lumenfield", "Corvane", "Brightmoor", "Tessaro", "Quillpoint")
_JOBS: Final = (
    ("midwife", "delivers babies"),
    ("paramedic", "ambulance"),
    ("pharmacist", "chemist"),
)
_BOOKS: Final = ("The Salt Orchard", "A Map of Quiet Rooms", "Winter Ferries", "The Glass Harbour")
_COUNTRIES: Final = ("Chile", "Iceland", "Vietnam", "Ghana", "Finland")
_TOOLS: Final = (("pressure washer", "patio"), ("hedge trimmer", "hedge"), ("drill", "shelves"))
_CLUBS: Final = ("Feyenoord", "Benfica", "Celtic", "Sevilla")
_RESTAURANTS: Final = (
    ("Casa Aurelia", "Portuguese"),
    ("Little Saigon", "Vietnamese"),
    ("Osteria Verde", "Italian"),
)
_CAREERS: Final = (("primary school teacher", "teaching"), ("carpenter", "woodwork"))
_LANGUAGES: Final = ("Japanese", "Portuguese", "Greek", "Korean")
_PLACES: Final = (
    ("Kyoto", "Japan"),
    ("Crete", "Greece"),
    ("Seoul", "Korea"),
    ("Madeira", "Madeira"),
)


def _date(rng: random.Random) -> str:
    return f"{rng.randint(2, 27)} {rng.choice(_MONTHS)}"


@dataclass(frozen=True, slots=True)
class Fact:
    """A planted fact: its evidence turns (one per session it is spread over) and a question."""

    kind: str
    evidence: tuple[str, ...]
    question: str


Template = Callable[[random.Random], Fact]
P = random.Random


# -- templates, each in one split -------------------------------------------------------------
# dev


def _sister_city(r: P) -> Fact:
    name, (city, country) = r.choice(_NAMES), r.choice(_CITIES)
    return Fact(
        "single",
        (f"My sister {name} finally moved to {city} last month, she loves the tram rides.",),
        f"In which town in {country} is my sibling settled these days?",
    )


def _dog(r: P) -> Fact:
    (breed, breed_q), pet = r.choice(_DOGS), r.choice(("Biscuit", "Pepper", "Otto", "Maple"))
    return Fact(
        "single",
        (f"Our {breed} {pet} turned three today, he got a whole sausage as a treat.",),
        f"What's the name of our {breed_q}?",
    )


def _allergy(r: P) -> Fact:
    food, food_q = r.choice(_FOODS)
    return Fact(
        "single",
        (f"I'm allergic to {food}, so any recipe you suggest has to leave them out.",),
        f"Which ingredient makes me ill ({food_q} or something else)?",
    )


def _hobby_start(r: P) -> Fact:
    (hobby, hobby_q), when = r.choice(_HOBBIES), _date(r)
    return Fact(
        "temporal",
        (f"I started a {hobby} class on {when}, every Tuesday evening at the community centre.",),
        f"When did I begin the {hobby_q} lessons?",
    )


def _flight(r: P) -> Fact:
    (place, country), when = r.choice(_PLACES), _date(r)
    return Fact(
        "temporal",
        (f"We fly to {place} on {when} for my parents' anniversary.",),
        f"What day do we leave for the {country} trip?",
    )


def _half_marathon(r: P) -> Fact:
    when, minutes = _date(r), r.randint(95, 140)
    return Fact(
        "temporal",
        (f"I ran my first half marathon on {when} and finished in {minutes} minutes.",),
        "On what date did I complete the 21 km race?",
    )


def _friend_company(r: P) -> Fact:
    friend, company, (city, _) = r.choice(_NAMES), r.choice(_COMPANIES), r.choice(_CITIES)
    return Fact(
        "multi_hop",
        (
            f"My best friend {friend} got a job at {company}, she starts after the summer.",
            f"Apparently {company} is opening an office in {city} next year.",
        ),
        "Which city is my closest friend's new employer expanding to?",
    )


def _brother_wife(r: P) -> Fact:
    brother, wife, (job, _) = r.choice(_MEN), r.choice(_NAMES), r.choice(_JOBS)
    return Fact(
        "multi_hop",
        (
            f"My brother {brother} married {wife} in a tiny ceremony by the lake.",
            f"{wife} works as a {job} at the children's hospital, nights mostly.",
        ),
        "What does my sister-in-law do for a living?",
    )


def _book_club(r: P) -> Fact:
    book, country = r.choice(_BOOKS), r.choice(_COUNTRIES)
    return Fact(
        "multi_hop",
        (
            f"The book club picked {book} for this month.",
            f"Fun fact: the writer of {book} grew up in {country} and wrote it on a ferry.",
        ),
        "Where did the author of our reading group's current pick spend their childhood?",
    )


def _career(r: P) -> Fact:
    career, career_q = r.choice(_CAREERS)
    return Fact(
        "open",
        (
            f"Honestly I keep thinking about quitting the office to become a {career}; "
            "spreadsheets drain me.",
        ),
        f"What have I said about changing careers, maybe to {career_q}?",
    )


def _cycling(r: P) -> Fact:
    return Fact(
        "open",
        ("Since I started cycling to work I sleep better and feel much less anxious.",),
        "How has the way I commute affected my wellbeing?",
    )


def _language(r: P) -> Fact:
    language = r.choice(_LANGUAGES)
    return Fact(
        "open",
        (f"I want to learn {language} before the trip, maybe twenty minutes a day on an app.",),
        "What are my plans for picking up a foreign tongue?",
    )


# heldout


def _author(r: P) -> Fact:
    author = r.choice(_AUTHORS)
    return Fact(
        "single",
        (f"My favourite writer lately is {author}; I devour everything she publishes.",),
        "Whose novels have I been enjoying the most?",
    )


def _car(r: P) -> Fact:
    car, car_q = r.choice(_CARS)
    return Fact(
        "single",
        (f"I drive a {car} that I bought second-hand from a neighbour.",),
        f"What vehicle do I own, a {car_q}?",
    )


def _instrument(r: P) -> Fact:
    kid, (instrument, family) = r.choice(_NAMES), r.choice(_INSTRUMENTS)
    return Fact(
        "single",
        (f"My daughter {kid} plays the {instrument} in the school orchestra.",),
        f"Which {family} instrument does my child perform on at school?",
    )


def _grandma(r: P) -> Fact:
    when = _date(r)
    return Fact(
        "temporal",
        (f"Grandma turns ninety on {when}; we're planning a surprise party.",),
        "When is my grandmother's 90th birthday?",
    )


def _keys(r: P) -> Fact:
    when = _date(r)
    return Fact(
        "temporal",
        (f"We got the keys to the new flat on {when}, boxes everywhere.",),
        "When did we move into the apartment?",
    )


def _dentist(r: P) -> Fact:
    when = _date(r)
    return Fact(
        "temporal",
        (f"My dentist appointment got moved to {when} at nine.",),
        "When's my dental check-up now?",
    )


def _neighbour_tool(r: P) -> Fact:
    neighbour, (tool, thing) = r.choice(_NAMES), r.choice(_TOOLS)
    return Fact(
        "multi_hop",
        (
            f"{neighbour} from next door lent me her {tool} for the weekend.",
            f"Used the {tool} on the {thing} all Saturday, it looks brand new.",
        ),
        "What did I fix up with the thing I borrowed from the lady living beside us?",
    )


def _coach(r: P) -> Fact:
    kid, coach, club = r.choice(_MEN), r.choice(_MEN), r.choice(_CLUBS)
    return Fact(
        "multi_hop",
        (
            f"Our son {kid} has football practice with coach {coach} on Wednesdays.",
            f"Turns out {coach} played for {club} before his knee injury.",
        ),
        "Which club did my boy's soccer trainer play for?",
    )


def _restaurant(r: P) -> Fact:
    restaurant, cuisine = r.choice(_RESTAURANTS)
    return Fact(
        "multi_hop",
        (
            f"For Mum's birthday we booked a table at {restaurant}.",
            f"{restaurant} does {cuisine} food and sits right by the harbour.",
        ),
        "What type of cuisine did we have for my mother's celebration?",
    )


def _dad(r: P) -> Fact:
    return Fact(
        "open",
        ("I worry that my dad is lonely since he retired; he barely leaves the house.",),
        "How do I feel about my father's situation?",
    )


def _family_plans(r: P) -> Fact:
    return Fact(
        "open",
        ("We're debating whether to try for a second baby or buy a bigger house first.",),
        "What big household decisions are we weighing up?",
    )


def _gardening(r: P) -> Fact:
    return Fact(
        "open",
        ("Gardening has become my way to unwind; the tomatoes this year were amazing.",),
        "What do I do to relax?",
    )


TEMPLATES: Final[dict[str, tuple[Template, ...]]] = {
    "dev": (
        _sister_city,
        _dog,
        _allergy,
        _hobby_start,
        _flight,
        _half_marathon,
        _friend_company,
        _brother_wife,
        _book_club,
        _career,
        _cycling,
        _language,
    ),
    "heldout": (
        _author,
        _car,
        _instrument,
        _grandma,
        _keys,
        _dentist,
        _neighbour_tool,
        _coach,
        _restaurant,
        _dad,
        _family_plans,
        _gardening,
    ),
}

# -- filler: everyday chat that shares the questions' vocabulary -------------------------------

_ASKS: Final = (
    "What should I cook tonight with {food} and some rice?",
    "Any tips for sleeping better when work is stressful?",
    "Can you recommend a film for a rainy weekend with the family?",
    "My sister sent photos of her new flat, how do I hang shelves on a brick wall?",
    "Plan a short walk near {city} for Saturday, nothing too steep.",
    "What is a good birthday present for a ten-year-old who likes music?",
    "How long should I boil eggs for a soft yolk?",
    "Help me write a message to the school about the class trip.",
    "Which houseplants survive with little light?",
    "Give me a quick stretching routine after running.",
    "Remind me what to pack for a week of travel in spring.",
    "How do I get my dog to stop pulling on the lead?",
)
_ANSWERS: Final = (
    "Here are three ideas; the second one takes about {n} minutes.",
    "Keep a regular bedtime, dim the screens an hour before and skip coffee after lunch.",
    "A gentle comedy works well; I listed {n} options with their running times.",
    "Use wall plugs suited to brick and a masonry bit; mark the level line first.",
    "A loop of about {n} km along the river, mostly flat, with a cafe halfway.",
    "A simple keyboard or a ukulele is a lovely gift at that age.",
    "About six minutes from boiling water, then straight into cold water.",
    "Here is a short, friendly draft you can adapt.",
    "Snake plants, pothos and ZZ plants cope well with shade.",
    "Hold each stretch for {n} seconds: calves, hamstrings, quads, hips.",
    "Layers, a light rain jacket, comfortable shoes and an adapter.",
    "Stop when the lead goes tight and reward him when he comes back to your side.",
)
_ACKS: Final = ("Noted!", "That sounds lovely.", "Good to know, I'll remember that.", "Oh nice.")


class _Ids:
    def __init__(self, session: str) -> None:
        self.session, self.count = session, 0

    def next(self) -> str:
        self.count += 1
        return f"{self.session}-m{self.count:03d}"


def _filler(rng: random.Random, ids: _Ids) -> list[Message]:
    values = {
        "food": rng.choice(_FOODS)[1],
        "city": rng.choice(_CITIES)[0],
        "n": rng.randint(3, 40),
    }
    index = rng.randrange(len(_ASKS))
    return [
        Message(ids.next(), "user", _ASKS[index].format(**values)),
        Message(ids.next(), "assistant", _ANSWERS[index].format(**values)),
    ]


def generate(
    split: str,
    seed: int,
    *,
    users: int = 8,
    sessions_per_user: int = 4,
    fillers_per_fact: int = 3,
    prefix: str = "p",
) -> Dataset:
    """Personal chats of ``split``: every template of the split planted once per user, its
    evidence turns spread over distinct sessions (dated by their first turn)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}")
    rng = random.Random(f"{seed}:{split}")
    sessions: list[Session] = []
    questions: list[Question] = []
    for u in range(1, users + 1):
        user = f"{prefix}{split}-user-{u}"
        plan: list[list[tuple[str, int]]] = [[] for _ in range(sessions_per_user)]
        facts: list[Fact] = []
        for template in TEMPLATES[split]:
            fact = template(rng)
            order = rng.sample(range(sessions_per_user), len(fact.evidence))
            for part, s in enumerate(sorted(order)):
                plan[s].append((f"{len(facts)}", part))
            facts.append(fact)
        said: dict[tuple[int, int], str] = {}
        day = rng.randint(1, 20)
        for s in range(sessions_per_user):
            session = Session(f"{prefix}{split}-u{u}-s{s + 1}", user)
            ids = _Ids(session.id)
            month = _MONTHS[(s + day) % len(_MONTHS)]
            blocks = [[Message(ids.next(), "user", f"(Chat of {day + s} {month})")]]
            rng.shuffle(plan[s])
            for key, part in plan[s]:
                for _ in range(rng.randint(1, fillers_per_fact)):
                    blocks.append(_filler(rng, ids))
                said_id = ids.next()
                said[(int(key), part)] = said_id
                text = facts[int(key)].evidence[part]
                blocks.append(
                    [
                        Message(said_id, "user", text),
                        Message(ids.next(), "assistant", rng.choice(_ACKS)),
                    ]
                )
            blocks.append(_filler(rng, ids))
            half = -(-len(blocks) // 2)
            session.batches = [
                [m for block in blocks[i : i + half] for m in block]
                for i in range(0, len(blocks), half)
            ]
            sessions.append(session)
        for n, fact in enumerate(facts):
            evidence = tuple(said[(n, part)] for part in range(len(fact.evidence)))
            questions.append(
                Question(
                    f"{prefix}{split}-q{len(questions) + 1:03d}",
                    user,
                    fact.kind,
                    fact.question,
                    evidence,
                )
            )
    return Dataset(seed, sessions, questions)
