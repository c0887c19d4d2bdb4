"""Catalogue data: python, debugging, testing (the seed's ``python-lora`` domains).

Data only (see :mod:`registry.dispatch.catalogue` for the notation). Imports only the standard
library and the catalogue's types.
"""

from __future__ import annotations

from registry.dispatch.domain_spec import DomainSpec

PYTHON = DomainSpec(
    name="python",
    aliases=("py", "python3", "cpython", "python programming", "python development"),
    strong="""
    ~python|python2|python3|pythonic|cpython|pypy|pip|pip3|pipx|pypi|pytest|unittest|doctest|
    django|~flask|fastapi|starlette|pydantic|alembic|~celery|asyncio|aiohttp|httpx|
    virtualenv|venv|virtual environment|conda|~anaconda|miniconda|~poetry|pipenv|pip-tools|~uv|
    pyproject|setuptools|wheel file|mypy|pyright|ruff|flake8|pylint|isort|
    jinja2|gunicorn=0.6|uvicorn|wsgi|asgi|werkzeug|jsonify|beautifulsoup|bs4|lxml=0.6|scrapy|
    ~selenium=0.6|~pillow=0.7|tkinter|pygame|pyinstaller|cython=0.7|pybind11=0.6|numpy=0.6|
    scipy=0.6|pytorch=0.6|~torch=0.6|dataloader=0.6|gil|global interpreter lock|dunder|
    __init__|__new__|__main__|__name__|__repr__|__str__|__eq__|__hash__|__slots__|__enter__|
    __exit__|__dict__|__getattr__|__call__|kwargs|functools|lru_cache|itertools|~collections|
    defaultdict|namedtuple|dataclass(es)|typeddict|~typing|type hint(s)|f-string(s)|
    list comprehension(s)|dict comprehension|generator expression|yield from|contextmanager|
    context manager(s)|~decorator(s)=0.7|metaclass(es)|~pickle|pathlib|argparse|
    subprocess=1.0|multiprocessing|threadpoolexecutor|processpoolexecutor|concurrent.futures|
    importerror|modulenotfounderror|attributeerror|keyerror|indexerror|valueerror|nameerror|
    indentationerror|taberror|recursionerror|zerodivisionerror|unboundlocalerror|
    stopiteration|typeerror=0.6|runtimeerror=0.6|traceback=0.7|pdb|ipdb|
    sys.path|sys.argv|site-packages|__pycache__|
    monkeypatch|pytest-asyncio|~hypothesis=0.6|freezegun|mock.patch|unittest.mock|
    logging module|asyncio.run|event loop=0.5|coroutine(s)=0.6|never awaited|was never awaited|
    self parameter|bound method|staticmethod|classmethod|property decorator|
    mutable default|default argument(s)|integer division|floor division|walrus|
    object is not callable|object is not subscriptable|object is not iterable|
    has no attribute|unsupported operand type(s)|positional argument(s)=0.8|
    keyword argument(s)=0.7|unexpected keyword argument|takes no arguments|
    elif=0.8|isinstance=0.8|microsoft visual c++=1.2|build tools=0.5|building wheel|
    failed building wheel|none type|nonetype|
    jupyter=0.6|ipython|django orm|drf|django rest framework|ctypes|cffi|csv module=0.8|
    python-syntax=0.8
    """,
    weak="""
    script(s)|module(s)|package(s)|import|def|lambda|tuple(s)|dict|dictionary|dictionaries|
    list comprehension|indentation|indent|self|method(s)|class(es)|instance(s)|attribute(s)|
    interpreter|virtual env|library|libraries|datetime|json|regex|thread(s)|threading|
    garbage collection|garbage collector|reference counting|reference count(s)|iterator(s)|
    generator(s)|closure(s)|inheritance|
    exception(s)|raise|try/except|except|with statement|string formatting|encoding|unicode
    """,
    files="""
    .py|.pyi|.pyx=0.8|.pxd=0.8|.pyw|requirements.txt|requirements-dev.txt|requirements*.txt|
    pyproject.toml|setup.py|setup.cfg|pipfile|pipfile.lock|poetry.lock|tox.ini|noxfile.py|
    manage.py|wsgi.py|asgi.py|conftest.py|.python-version|mypy.ini|.flake8|.pylintrc|
    __init__.py|environment.yml=0.5|.ipynb=0.5
    """,
    outranks=("markdown",),  # the code that handles markup, not the markup
    exemplars=(
        "what is the difference between a list and a tuple in Python",
        "my Python script is slow when it processes a big file line by line",
        "how do I structure a Python package with modules and an entry point",
        "write a Python function that reads a config file and validates it",
        "why do I get an error saying a name is not defined when I call my function",
        "how do decorators work and how do I write one that takes arguments",
        "explain generators and the yield keyword",
        "what does the if __name__ == '__main__' block do",
        "my virtual environment does not see the packages I installed",
        "pip install fails while building a wheel for a package",
        "how do I add type hints so mypy stops complaining",
        "convert this script into a command line tool with subcommands and options",
        "Django view is slow and makes too many database queries",
        "build a small REST API with Flask or FastAPI",
        "when should I use threads, processes or asyncio for this workload",
        "the interpreter complains that the indentation is inconsistent",
        "why does modifying a dictionary while looping over it raise an error",
        "a method complains it got too many positional arguments",
        "why does my function's default list keep the values from earlier calls",
        "how do I read and write JSON files and handle dates in them",
        "refactor this class to use dataclasses and properties",
        "catch an exception, log the traceback and keep the loop going",
        "how do I profile a program and find which of my functions is slow",
        "dividing two whole numbers gives a float, how do I get an integer result",
        "how can I tell whether my file is run as a program or imported by another file",
        "object instances are never freed because a cache keeps references to them",
        "parse a few thousand saved web pages and extract the titles quickly",
        "what is the difference between copying a nested list and a deep copy",
    ),
)

DEBUGGING = DomainSpec(
    name="debugging",
    aliases=("debug", "troubleshooting", "bug fixing", "debugging python"),
    strong="""
    debugging=0.7|debugger=0.7|debug=0.5|breakpoint(s)=0.6|step through=0.6|stack trace=0.6|
    root cause=0.5|bisect=0.5|git bisect=0.6|heisenbug=0.7|print debugging=0.7|
    reproduce the bug=0.6|minimal reproduction=0.6
    """,
    weak="""
    bug(s)|crash(es,ed)|error message|fails|failing|broken|doesn't work|not working|wrong result|
    unexpected|exception|traceback|logs|logging
    """,
    exemplars=(
        "help me find why this function returns the wrong value",
        "my program crashes sometimes and I cannot reproduce it reliably",
        "how do I use a debugger to step through my code and inspect variables",
        "read this traceback and tell me where the error really comes from",
        "the script silently does nothing, how do I figure out what is going on",
        "set a breakpoint inside a loop only when a condition is true",
        "my code worked yesterday and now fails, how do I find the change that broke it",
        "add logging so I can see what happens before the failure",
    ),
)

TESTING = DomainSpec(
    name="testing",
    aliases=("tests", "unit testing", "test automation", "qa"),
    strong="""
    unit test(s)=0.8|unit testing=0.8|test case(s)=0.7|test suite(s)=0.7|testing=0.6|
    fixture(s)=0.6|mock(s)=0.6|mocking=0.6|stub(s)=0.5|flaky=0.7|flaky test(s)=0.8|
    test coverage=0.7|code coverage=0.7|tdd=0.7|test-driven=0.7|integration test(s)=0.7|
    property-based testing=0.8|property-based test(s)=0.8|parametrize=0.8|parametrized=0.7|
    regression test(s)=0.7|
    snapshot test(s)=0.6|snapshot testing=0.6|assertion(s)=0.5
    """,
    weak="""
    ~test(s)|tested|assert|coverage|ci run|edge case(s)|passes locally
    """,
    files="""
    test_*.py|*_test.py|tests/=0.5|test/=0.4|pytest.ini|.coveragerc|conftest.py
    """,
    exemplars=(
        "write unit tests for this function including the edge cases",
        "this test passes on my machine but fails about one run in five",
        "how do I replace a network call with a fake object in a test",
        "set up a fixture that creates a fresh temporary database for each test",
        "how do I test code that depends on the current time",
        "measure test coverage and find the untested branches",
        "the same test setup is repeated everywhere, how do I share it",
        "write parametrized test cases for a string helper",
        "my test suite takes twenty minutes, how can I make it faster",
        "should I test private helpers or only the public behaviour",
    ),
)

DOMAINS = (PYTHON, DEBUGGING, TESTING)
