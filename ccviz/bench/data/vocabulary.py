"""Word pools and sentence templates for the synthetic documents of the retention benchmark.

Pure data. Two rules keep every case honest: the pools that supply a fact's value (``FACT_VALUES``)
share no entry with the pools used by filler, and no filler template contains a fact's cue words
(allergic, policy number, code name, ...), so the load-bearing fact is stated exactly once.
Templates are ``str.format`` strings; every ``{slot}`` names a pool below, except the slots fixed per
document (``{pron}`` / ``{obj}`` / ``{poss}`` / ``{title}``: the patient's pronouns and title;
``{speaker}`` / ``{friend}``: the two people of a chat); a trailing 2 (``{diet2}``) is a second,
different draw from the same pool.
"""

from __future__ import annotations

POOLS: dict[str, tuple[str, ...]] = {
    "first": (
        "Anna", "Marek", "Lucia", "Omar", "Helen", "Kenji", "Sofia", "Daniel", "Priya", "Jonas", "Amara",
        "Pavel", "Rosa", "Theo", "Leila", "Victor", "Chloe", "Ibrahim", "Nora", "Felix", "Mei", "Samuel",
    ),
    "surname": (
        "Keller", "Moreau", "Nakamura", "Brennan", "Castillo", "Lindqvist", "Petrov", "Adeyemi", "Haddad",
        "Novak", "Fischer", "Ramos", "Whitfield", "Kowalski", "Duarte", "Sato", "Mensah", "Grant", "Varga",
    ),
    "vegetable": ("carrots", "spinach", "peppers", "broccoli", "courgettes", "green beans", "cabbage"),
    "doctor": ("Albrecht", "Okonjo", "Laine", "Ferreira", "Tanaka", "Hollis", "Dubois", "Marsh"),
    "acknowledgement": (
        "Thanks, I will keep that in mind.", "Noted, thank you for telling me.", "Good to know, thanks.",
        "Thank you, that is useful to know.",
    ),
    "speaker": ("Maya", "Tom", "Lena", "Ravi", "Julia", "Ben", "Aisha", "Noah", "Elena", "Hugo"),
    "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"),
    "month": ("January", "February", "March", "April", "May", "June", "July", "September", "October", "November"),
    "symptom": (
        "mild headaches", "a dry cough", "stiffness in the lower back", "occasional dizziness", "poor appetite",
        "tingling in the left hand", "shortness of breath on stairs", "swollen ankles", "trouble sleeping",
        "a sore throat", "pain in the right knee", "fatigue in the afternoons", "heartburn after meals",
    ),
    "duration": ("two days", "three days", "about a week", "ten days", "two weeks", "a month", "several weeks"),
    "test": (
        "blood count", "chest X-ray", "kidney function panel", "thyroid panel", "ECG", "liver panel",
        "urine analysis", "ultrasound of the abdomen", "lipid profile", "vitamin D level", "HbA1c test",
    ),
    "finding": (
        "within normal limits", "slightly elevated", "unchanged from the previous visit", "mildly reduced",
        "borderline", "clearly improved", "stable",
    ),
    "med": (
        "metformin", "lisinopril", "atorvastatin", "omeprazole", "levothyroxine", "amlodipine", "sertraline",
        "metoprolol", "furosemide", "gabapentin", "paracetamol", "ramipril", "prednisolone",
    ),
    "dose": ("5", "10", "20", "25", "40", "50", "100", "250", "500"),
    "freq": ("once daily", "twice daily", "every morning", "at bedtime", "with breakfast", "every other day"),
    "change": ("increased to", "reduced to", "kept at", "set to"),
    "body": ("shoulder", "knee", "hip", "ankle", "neck", "lower back", "wrist"),
    "exercise": (
        "short walks after lunch", "gentle stretching every morning", "swimming twice a week",
        "balance exercises at home", "cycling on a stationary bike", "breathing exercises",
    ),
    "diet": (
        "less salt", "more vegetables and fish", "smaller evening meals", "fewer sugary drinks",
        "more water during the day", "regular meal times",
    ),
    "nurse_note": (
        "that the wound was clean and dry", "good understanding of the care plan", "a steady gait with a cane",
        "that the patient was cheerful and talkative", "mild swelling around the old incision",
        "that the family visited in the afternoon", "that the patient asked about returning to work",
    ),
    "city": (
        "Lisbon", "Kyoto", "Montreal", "Edinburgh", "Vienna", "Cape Town", "Oslo", "Seville", "Hanoi",
        "Krakow", "Melbourne", "Valparaiso", "Tallinn", "Porto",
    ),
    "dish": (
        "a mushroom risotto", "lentil soup", "a vegetable curry", "roast chicken", "fish tacos", "a lemon tart",
        "homemade bread", "a tomato salad", "pancakes", "a bean stew", "stuffed peppers",
    ),
    "hobby": (
        "pottery", "rock climbing", "birdwatching", "learning the guitar", "chess", "gardening", "photography",
        "running", "knitting", "sketching", "sailing",
    ),
    "book": (
        "a mystery novel", "a biography of a famous chemist", "a travel memoir", "a book about sleep",
        "a history of the railways", "a collection of short stories", "a cookbook from Morocco",
    ),
    "work_thing": (
        "the quarterly report", "a presentation for a client", "the new scheduling system", "a difficult audit",
        "training two new colleagues", "a move to another team", "an office renovation",
    ),
    "feeling": ("a bit stressed", "excited", "tired", "hopeful", "nervous", "relieved", "curious"),
    "tip": (
        "break the task into small steps", "set a fixed time each day", "write down what worked",
        "ask a friend to join you", "keep a short checklist", "start with the hardest part in the morning",
        "take a short break every hour",
    ),
    "committee": (
        "Facilities", "Library Board", "Community Garden", "Parents' Association", "Transport Working Group",
        "Neighbourhood Council", "Museum Volunteers", "Sports Club",
    ),
    "topic": (
        "the spring newsletter", "the heating repairs", "volunteer recruitment", "the summer festival",
        "the website update", "parking near the entrance", "the annual accounts", "the new opening hours",
        "bicycle storage", "the noise complaints", "the school partnership", "the recycling scheme",
    ),
    "outcome": (
        "agreed to revisit the question next month", "asked for two more quotes", "approved the draft plan",
        "postponed the decision", "formed a small working group", "agreed to survey the members first",
        "noted the update without discussion",
    ),
    "concern": (
        "the cost of materials", "the timeline", "the workload of volunteers", "access for wheelchair users",
        "the lack of storage", "the weather", "communication with the council",
    ),
    "times": ("once", "twice", "three times", "every day"),
    "tens": tuple(str(n) for n in range(12, 98, 7)),
    "systolic": tuple(str(n) for n in range(104, 170, 3)),
    "diastolic": tuple(str(n) for n in range(62, 98, 2)),
    "pulse": tuple(str(n) for n in range(55, 99, 3)),
    "saturation": ("93", "94", "95", "96", "97", "98"),
}

# Sentences are "{opening} {core}" with an optional opening, so few templates give many sentences.
CLINICAL_OPENINGS = (
    "", "On examination,", "During the morning round,", "Later that day,", "At the end of the visit,",
    "According to the nursing notes,", "At the follow-up,", "In the afternoon,",
)
CLINICAL_CORES = (
    "blood pressure was {systolic}/{diastolic} mmHg and the pulse was {pulse} beats per minute.",
    "{pron} reported {symptom} that began {duration} ago.",
    "Dr. {doctor} reviewed the {test} with {obj}; the results were {finding}.",
    "the dose of {med} was {change} {dose} mg {freq}.",
    "a repeat {test} was ordered for next {weekday}.",
    "{pron} described {symptom}, which {pron} rated as moderate.",
    "the nurse noted {nurse_note}.",
    "physiotherapy focused on {body} mobility and {exercise}.",
    "the dietitian suggested {diet} and {diet2}.",
    "{pron} said the {med} was easy to take {freq}.",
    "the {test} came back {finding}.",
    "{poss} sleep has been better since starting {exercise}.",
    "{pron} was advised to report any new {symptom} promptly.",
    "Dr. {doctor} discussed the plan with {poss} daughter by phone.",
    "oxygen saturation was {saturation} percent on room air at rest.",
    "{pron} asked whether {med} could be taken {freq}.",
    "the {body} showed a good range of movement.",
    "weight was stable at {tens} kilograms.",
    "a referral to the {body} clinic was discussed but not yet made.",
    "{pron} mentioned walking to the market {times} this week.",
)
# Chat exchanges: a line of the speaker (whose fact is asked about), then the friend's reply.
CHAT_EXCHANGES = (
    ("I finally booked a trip to {city} for {month}.", "That sounds lovely. {city} is wonderful in {month}."),
    ("I tried cooking {dish} last night and it turned out well.",
     "Great job. Cooking {dish} is good practice for timing and seasoning."),
    ("Work has been busy because of {work_thing}.", "That sounds like a lot. It might help to {tip}."),
    ("I have started {hobby} on weekends.", "Nice, {hobby} is a good way to relax. Try to {tip}."),
    ("I am reading {book} at the moment.", "Good choice. I read {book2} last year and enjoyed it."),
    ("I feel {feeling} about {work_thing}.", "It is normal to feel {feeling} about that. Maybe {tip}."),
    ("My neighbour {first} invited me to try {hobby}.", "You should go. {first} sounds like good company."),
    ("Do you have ideas for a quick dinner? I have some {vegetable} and rice.",
     "You could make a simple stir-fry with the rice, {vegetable} and a little garlic."),
    ("I walked for {tens} minutes along the river this morning.",
     "A walk by the river is a great start to the day, especially in {month}."),
    ("My cousin {first} is visiting from {city} next {weekday}.", "I hope you and {first} have a good time together."),
    ("How do I stay focused when I work from home on {weekday}s?", "One idea is to {tip}, and to {tip2}."),
    ("I want to get better at {hobby}, but I only have evenings free.",
     "Evenings are enough if you {tip}. Small steps add up."),
    ("I watched a documentary about {city} yesterday.", "I have always wanted to visit {city}. Was it good?"),
    ("The weather in {month} was terrible for {hobby}.", "Maybe try {hobby2} indoors until it improves."),
)

MEETING_OPENINGS = ("", "After a short discussion,", "Turning to {topic2},", "Under any other business,", "Next,")
MEETING_CORES = (
    "{first} {surname} presented an update on {topic}.",
    "members raised concerns about {concern}.",
    "the group {outcome}.",
    "{first} {surname} offered to draft a proposal on {topic}.",
    "the chair thanked {first} for the work on {topic}.",
    "it was noted that {concern} remains an open issue.",
    "{first} {surname} reported that {tens} people had replied to the survey.",
    "the secretary will circulate the notes on {topic} by {weekday}.",
    "the committee {outcome} after hearing from {first} {surname}.",
    "volunteers for {topic} are still needed, especially on {weekday}s.",
    "{first} {surname} asked about {concern} and {concern2}.",
    "the treasurer confirmed that the spending on {topic} is on track.",
    "members agreed that {topic} should be discussed with the council.",
    "{first} {surname} will contact the supplier about {concern}.",
    "a short presentation on {topic} was well received.",
    "the next steps on {topic} will be decided in {month}.",
)

# One record per (kind, fact type): how the fact is stated (variants), the question, and the value pool.
FACT_VALUES: dict[str, tuple[str, ...]] = {
    "allergy": (
        "penicillin", "latex", "shellfish", "peanuts", "aspirin", "codeine", "amoxicillin", "sesame",
        "ibuprofen", "morphine", "walnuts", "bee stings", "tetracycline", "strawberries",
    ),
    "identifier": tuple(f"{a}{b}-{n}" for a, b, n in zip("KQRTVXZMHW", "XLPDNBGSCF", range(4817, 9999, 517))),
    "number": tuple(str(n) for n in range(1003, 9999, 379)),
    "name": (
        "Biscuit", "Ingrid", "Thaddeus", "Marisol", "Ezekiel", "Winifred", "Casimir", "Ottoline",
        "Leopold", "Seraphina", "Barnaby", "Rosalind", "Percival", "Clementine",
    ),
}
FACTS: dict[str, dict[str, dict[str, tuple[str, ...] | str]]] = {
    "clinical": {
        "allergy": {
            "statements": ("The patient is allergic to {value}.", "Important: {pron} is allergic to {value}."),
            "question": "What is the patient allergic to?",
        },
        "identifier": {
            "statements": ("The patient's insurance policy number is {value}.",),
            "question": "What is the patient's insurance policy number?",
        },
        "number": {
            "statements": ("The patient's locker number at the clinic is {value}.",),
            "question": "What is the patient's locker number at the clinic?",
        },
        "name": {
            "statements": ("The patient's emergency contact is a friend called {value}.",),
            "question": "What is the name of the patient's emergency contact?",
        },
    },
    "chat": {
        "allergy": {
            "statements": ("{speaker}: By the way, I am allergic to {value}.\n{friend}: {acknowledgement}",),
            "question": "What is {speaker} allergic to?",
        },
        "identifier": {
            "statements": ("{speaker}: My booking reference is {value}, in case I need it later.\n{friend}: {acknowledgement}",),
            "question": "What is {speaker}'s booking reference?",
        },
        "number": {
            "statements": ("{speaker}: My gym membership number is {value}.\n{friend}: {acknowledgement}",),
            "question": "What is {speaker}'s gym membership number?",
        },
        "name": {
            "statements": ("{speaker}: We adopted a dog and named him {value}.\n{friend}: {acknowledgement}",),
            "question": "What is the name of {speaker}'s dog?",
        },
    },
    "meeting": {
        "identifier": {
            "statements": ("The new project code name is {value}.",),
            "question": "What is the new project code name?",
        },
        "number": {
            "statements": ("The committee approved a budget of {value} euros.",),
            "question": "How many euros did the committee approve as the budget?",
        },
        "name": {
            "statements": ("The committee elected {value} as the new safety officer.",),
            "question": "Who was elected as the new safety officer?",
        },
    },
}
