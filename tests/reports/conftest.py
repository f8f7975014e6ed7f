"""The report tests' shared fixtures."""

from __future__ import annotations

import pytest

from tests.reports.browser import ARGS, CHROMIUM


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium under playwright, one per test module."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        yield b
        b.close()
