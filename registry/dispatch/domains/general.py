"""Catalogue data: what is not a specialist's work.

- ``programming`` (corroboration): general software words; they never route a task, they only
  confirm that an ambiguous keyword (``python``, ``markdown``, ``docker``) is meant technically;
- ``consumer tech`` (a topic no fleet serves): buying and fixing devices;
- ``general`` (background): everyday requests, compared with the task in tier 3 so that a task
  closer to them than to any specialist's exemplars falls back to the base model.

Data only (see :mod:`registry.dispatch.catalogue` for the notation).
"""

from __future__ import annotations

from registry.dispatch.domain_spec import DomainSpec

PROGRAMMING = DomainSpec(
    name="programming",
    kind="corroboration",
    strong="""
    code|coding|programming|programmer|developer(s)|software|function(s)|variable(s)|
    method(s)|class(es)|bug(s)|compile(r,s,d)|exception(s)|stack trace|traceback|api(s)|
    library|libraries|framework(s)|loop(s)|array(s)|string(s)|integer(s)|script(s)|program(s)|
    repo|repository|git|github|gitlab|commit(s)|pull request(s)|refactor|refactoring|
    deploy|deployment|server(s)|database(s)|query|queries|endpoint(s)|json|yaml|config|
    configuration|build|runtime|thread(s)|process(es)|memory|cpu|linux|terminal|ide|vscode|
    module(s)|package(s)|install|installed|import|error|errors|crash(es,ed)|debug|test(s)|
    syntax|type(s)|object(s)|list(s)|dict|install(s)|version(s)|dependency|dependencies|
    app|application|backend|frontend|web|file(s)|data|dataframe|column(s)|row(s)|table(s)|
    image(s)|container(s)|cluster|docs|documentation|readme|text editor|command(s)|cli|
    algorithm(s)|complexity|machine learning|model(s)|training|gpu|notebook|snippet|
    script|automation|pipeline|workflow|binary|executable|compiler|interpreter
    """,
)

CONSUMER_TECH = DomainSpec(
    name="consumer tech",
    aliases=("consumer hardware", "gadgets", "pc building", "tech support"),
    strong="""
    gaming=1.2|gaming pc|gamer|video game(s)|console=0.4|playstation|xbox|nintendo|steam deck|
    laptop(s)=0.8|desktop pc|ssd=0.8|hdd=0.8|nvme=0.8|hard drive|monitor(s)=0.5|
    mechanical keyboard(s)=1.2|keyboard(s)=0.6|switches=0.4|mouse=0.6|printer(s)=1.0|
    headphones|earbuds|airpods|motherboard|cpu cooler|power supply|psu|ram upgrade|
    iphone|android phone|smartphone|phone battery|charger|charging=0.7|tv|smart tv|
    smart home|alexa|google home|bluetooth=0.7|vram=0.6|graphics card(s)=0.6|fps=0.6|
    windows 11=0.7|windows 10=0.7|macbook|ipad|tablet=0.6|webcam|router=0.5|
    email account|gmail|outlook=0.6|icloud|photo(s) backup
    """,
    weak="buy|buying|worth it|budget|price|cheap|recommend|brand",
    exemplars=(
        "which laptop should I buy for college under a thousand dollars",
        "is an expensive graphics card worth it for playing games at 1440p",
        "my printer says it is offline although it is on the network",
        "is it bad for the battery to charge my phone overnight",
        "quiet keyboard switches for an open office",
        "SSD or hard drive for a game library",
        "how do I turn on two-factor login for my email",
        "bluetooth headphones keep disconnecting from my laptop",
    ),
)

GENERAL = DomainSpec(
    name="general",
    kind="background",
    exemplars=(
        "what is the capital of Canada",
        "why do leaves change colour in autumn",
        "explain how vaccines train the immune system, for a child",
        "what caused the fall of the Roman Empire, in a few sentences",
        "who wrote Pride and Prejudice and what is it about",
        "how far away is the moon",
        "why is the ocean salty",
        "compare mitosis and meiosis for my biology test",
        "what is the difference between a virus and a bacterium",
        "how do airplanes stay in the air",
        "give me a simple recipe for a weeknight pasta dinner",
        "my bread dough did not rise, what went wrong",
        "how long should I boil an egg for a soft yolk",
        "vegetarian lunch ideas that keep well for a few days",
        "is it safe to eat rice that was left out overnight",
        "plan a week-long trip to Portugal on a budget",
        "what should I pack for a hiking weekend in the mountains",
        "how much should I tip a taxi driver in Italy",
        "tips for sleeping on a long-haul flight",
        "how can I get better sleep when I work night shifts",
        "a beginner running plan to get to five kilometres",
        "how much water should I drink in a day",
        "is it normal for my knee to click when I squat",
        "should I put my savings into an index fund or pay off my loan",
        "how does compound interest work on a savings account",
        "what is the difference between a Roth and a traditional retirement account",
        "how do I make a monthly household budget",
        "do I need a lawyer to write a will",
        "can my landlord keep my deposit for normal wear and tear",
        "how do I politely say no to a friend's party invitation",
        "write a thank you note to my neighbour for watering the plants",
        "how do I apologise to a coworker after an argument",
        "rephrase this message so it sounds friendly but firm",
        "write a short poem about the sea at night",
        "tell me a funny joke about cats",
        "write a bedtime story about a brave little turtle",
        "translate 'where is the train station' into German",
        "what is the best way to learn Italian in a year",
        "write a birthday toast for my best friend",
        "recommend fantasy novels for someone who loved Lord of the Rings",
        "what are some good movies for a family night",
        "explain the offside rule in football",
        "how do I remove a coffee stain from a carpet",
        "my toilet keeps running after flushing, can I fix it myself",
        "how do I keep my houseplants alive in winter",
        "when should I plant tomatoes in my garden",
        "how do I get rid of ants in the kitchen",
        "is a hamster a good pet for a young child",
        "why does my dog eat grass",
        "what do koalas eat and how much do they sleep",
        "tips for passing a job interview",
        "how do I ask my boss for a raise",
        "should I change careers at forty",
        "write a cover letter for a marketing assistant position",
        "how do I study for exams without procrastinating",
        "help me prepare for my history exam on the French revolution",
        "how do I teach my kid to ride a bike",
        "gift ideas for my mother who loves gardening",
        "what discount should a shop give to clear last season's stock",
        "how should a small bakery price its cakes",
        "marketing ideas for a local coffee shop",
        "jeans or chinos for a casual office",
        "how do I choose a good winter coat",
        "my car makes a squeaking noise when I brake",
        "tips for my first time driving on the highway",
        "what is the meaning of life according to the Stoics",
        "hi, how are you today",
        "thanks, that was helpful",
        "what's the weather usually like in Scotland in May",
        "how does the stock market work, simply",
        "what is inflation and why do prices go up",
        "how do solar panels make electricity",
        "which wine goes well with salmon",
        "how strong is whisky compared to beer",
        "how do I get red wine out of a white shirt",
        "what is a good name for a golden retriever puppy",
        "how do I meditate as a beginner",
        "organise my chores into a weekly checklist",
        "turn my packing list into a checklist for each day of the trip",
        "summarise this rental agreement and what happens if I leave early",
        "can I afford a bigger apartment on my salary",
    ),
)

DOMAINS = (PROGRAMMING, CONSUMER_TECH, GENERAL)
