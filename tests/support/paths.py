"""Where the tests' files are: the repository, the tests, their fixtures (graphs
and projects the stacks serve) and this support package."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
