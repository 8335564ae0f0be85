"""A headless Chromium for the console's browser tests: Debian's ``chromium`` and ``chromium-driver``
driven by Selenium, with nothing downloaded at run time (the driver's path is given, so Selenium
Manager never runs) and nothing reaching outside this machine.

Chromium's background services (component updates, sync, field trials, ...) try the network at
start; on a closed network their refused connections slow it down, so they are switched off. Every
browser gets a fresh profile directory, removed when it quits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)
SCREENSHOT_DIR_ENV = "ONCEFLOW_SCREENSHOT_DIR"


def chromium_paths() -> tuple[str, str] | None:
    """``(browser, driver)`` from Debian's packages, or None when they are not installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        return None
    return browser, driver


@contextlib.contextmanager
def headless_chromium() -> Iterator:
    """A Selenium Chrome driver on a fresh profile; quits (and removes the profile) at the end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = chromium_paths()
    if paths is None:
        raise RuntimeError(
            "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        )
    browser, driver_path = paths
    profile = tempfile.mkdtemp(prefix="onceflow-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver) -> list[str]:
    """The browser console's errors since the last call (warnings and info left out)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def screenshot_dir(default: Path) -> Path:
    """Where screenshots go: ``$ONCEFLOW_SCREENSHOT_DIR`` when set, else ``default`` (a pytest tmp dir)."""
    chosen = Path(os.environ.get(SCREENSHOT_DIR_ENV) or default)
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen
