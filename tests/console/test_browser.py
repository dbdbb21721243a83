"""The console in a real headless Chromium (Debian's chromium + chromedriver, via Selenium):
log in with a project token, see only that project's jobs, open the cost page, screenshot it.

The browser comes from .ci/services/chromium.sh; in CI (CI=true) a missing browser fails the
test instead of skipping it. Screenshots go to $XIRANG_TEST_ARTIFACTS (default: the test's
temporary folder).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.cost.pools import OPERATOR_TOKEN

pytestmark = pytest.mark.service

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


def _binary(name: str, env: str) -> str:
    found = os.environ.get(env) or shutil.which(name)
    if not found:
        message = f"{name} not found: run .ci/services/chromium.sh (Debian chromium + driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture
def browser(tmp_path):
    chromium = _binary("chromium", "XIRANG_CHROMIUM")
    driver_path = _binary("chromedriver", "XIRANG_CHROMEDRIVER")
    from selenium import webdriver  # a dev extra: missing means the set-up is broken

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=driver_path)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("XIRANG_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def log_in(browser, console, token: str) -> None:
    """Fill the login form and wait until the overview page has loaded."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "login").click()
    WebDriverWait(browser, 20).until(expected_conditions.url_to_be(console.url + "/"))


def test_a_project_logs_in_sees_its_jobs_and_its_costs(console, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    browser.get(console.url + "/")
    assert browser.current_url.endswith("/login")
    log_in(browser, console, console.pool.tokens["nlp"])
    assert "project nlp" in browser.find_element(By.TAG_NAME, "header").text
    assert browser.find_element(By.ID, "capacity").text.count("a100") == 1

    browser.get(console.url + "/jobs")
    rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
    names = [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows]
    assert sorted(names) == ["nlp-train-0", "nlp-train-1", "nlp-train-2"]
    assert "vision-big" not in browser.page_source

    browser.find_element(By.LINK_TEXT, "Cost").click()
    WebDriverWait(browser, 20).until(expected_conditions.url_to_be(console.url + "/cost"))
    teams = browser.find_element(By.ID, "cost-team").text
    assert "research" in teams and "126.000000" in teams
    assert "limit" in browser.find_element(By.ID, "budgets").text
    shot = artifacts(tmp_path) / "console-cost-nlp.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_operator_sees_drained_nodes_with_their_reason_and_logs_out(console, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    browser.get(console.url + "/login")
    log_in(browser, console, OPERATOR_TOKEN)
    browser.get(console.url + "/nodes")
    first = browser.find_element(By.CSS_SELECTOR, "#nodes tbody tr").text
    assert "v100-0001" in first and "ECC errors on GPU 3" in first
    browser.get(console.url + "/")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart")  # charts from the metrics store
    browser.find_element(By.ID, "logout").click()  # a form posting the session's CSRF token
    WebDriverWait(browser, 20).until(expected_conditions.url_to_be(console.url + "/login"))
    browser.get(console.url + "/nodes")
    assert browser.current_url.endswith("/login")
