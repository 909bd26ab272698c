"""Drives `xtrace view --diff`'s page in Debian's headless Chromium (chromedriver + selenium), for
tests/tests/view_diff.rs: opens the URL xtrace printed, reads the comparison table's header and
rows (their cells' text), the verdict line and the differential flamegraph's frame names and
subtitle, optionally saves a screenshot, and clicks Close. Prints one JSON object on stdout:
{"header": [...], "rows": [[...], ...], "verdict": "...", "flame_names": [...], "flame_subtitle": "..."}.

Usage: view_diff_page.py URL [SCREENSHOT.png]
"""
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not look for drivers on the network

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By

FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1100",
]

TABLE = """
const t = document.getElementById('difftable');
return [Array.from(t.tHead.rows[0].cells, c => c.textContent),
        Array.from(t.tBodies[0].rows, r => Array.from(r.cells, c => c.textContent))];
"""


def wait_for(what, check, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise SystemExit(f"timed out waiting for {what}")


def flame(driver):
    """The flamegraph frame's titles and subtitle, once it has loaded."""
    try:
        driver.switch_to.frame(driver.find_element(By.ID, "flame"))
        return driver.execute_script(
            """const s = document.getElementById('subtitle');
               const names = Array.from(document.getElementsByTagName('title'), t => t.textContent);
               return names.length ? [names, s ? s.textContent : null] : null;"""
        )
    except WebDriverException:
        return None  # still loading
    finally:
        driver.switch_to.default_content()


def main():
    url = sys.argv[1]
    screenshot = sys.argv[2] if len(sys.argv) > 2 else None
    profile = tempfile.mkdtemp(prefix="xtrace-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        wait_for("the comparison", lambda: driver.find_element(By.ID, "diff").is_displayed())
        header, rows = driver.execute_script(TABLE)
        verdict = driver.find_element(By.ID, "verdict").text
        names, subtitle = wait_for("the differential flamegraph", lambda: flame(driver))
        if screenshot:
            driver.save_screenshot(screenshot)
        driver.find_element(By.ID, "stop").click()
        time.sleep(0.5)
        print(json.dumps({"header": header, "rows": rows, "verdict": verdict,
                          "flame_names": names[:50], "flame_subtitle": subtitle}))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
