"""Where the tests find the repository and their own data, whatever folder a test module sits in."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TEST_ASSETS = TESTS / "assets"  # tiny tokenizer, malformed LLM outputs, released-format fixtures
SAMPLE = REPO / "scholar_agents" / "assets" / "sample"  # the bundled real data sample
