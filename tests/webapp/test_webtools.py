"""The web tests' own tooling: where CI requires the browser, a browser test cannot pass by
skipping."""


def test_a_browser_test_fails_where_ci_requires_the_browser(monkeypatch):
    """CI installs Chromium and sets OAR_REQUIRE_BROWSER=1: a missing browser then fails the
    browser tests (the fixture fails) instead of skipping them; elsewhere they skip."""
    import webtools

    monkeypatch.setattr(webtools, "CHROMIUM", None)
    monkeypatch.setattr(webtools, "REQUIRE_BROWSER", False)
    assert webtools.needs_chromium().args == (True,)  # skipped
    monkeypatch.setattr(webtools, "REQUIRE_BROWSER", True)
    assert webtools.needs_chromium().args == (False,)  # runs, and the browser fixture fails it
