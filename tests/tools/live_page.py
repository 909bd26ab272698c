"""Drives xtrace's live view in Debian's headless Chromium (chromedriver + selenium), for
tests/tests/live.rs: opens the URL xtrace printed (token included), reads the probe rows while
they rise, reads the flamegraph's frame names, optionally saves a screenshot, clicks Stop and
waits for the page to say the capture stopped. Prints one JSON object on stdout:
{"counts": [...], "final_count": N, "flame_names": [...], "state": "...",
 "threads": [[TID, NAME, CALLS], ...]} (the thread table's last rows).

Usage: live_page.py URL PROBE [SCREENSHOT.png]
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


def row_count(driver, probe):
    """The whole-capture count of PROBE's row (None before the row appears), read in one script:
    the rows are rebuilt at every snapshot, so elements found one call earlier may be gone."""
    text = driver.execute_script(
        """const row = Array.from(document.querySelectorAll('#probes tbody tr'))
             .find(r => r.dataset.probe === arguments[0]);
           return row ? row.querySelectorAll('td.count')[2].textContent : null;""",
        probe,
    )
    return None if text is None else int(text.replace(",", ""))


def wait_for(what, check, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise SystemExit(f"timed out waiting for {what}")


def main():
    url, probe = sys.argv[1], sys.argv[2]
    screenshot = sys.argv[3] if len(sys.argv) > 3 else None
    profile = tempfile.mkdtemp(prefix="xtrace-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        # The token was traded for the cookie: the page is at / now.
        if driver.current_url.rstrip("/") != url.split("/?")[0]:
            raise SystemExit(f"not redirected to the page: {driver.current_url}")
        counts = []

        def rose():
            count = row_count(driver, probe)
            if count is not None and (not counts or counts[-1] != count):
                counts.append(count)
            return len([c for c in counts if c > 0]) >= 3

        wait_for(f"the {probe} row to rise", rose)
        # The flamegraph (an iframe holding inferno's SVG) names the probed function. Its
        # refresh every 5 s is turned off first, so that the frame is not replaced mid-read.
        driver.find_element(By.ID, "follow").click()

        def flame_names():
            driver.find_element(By.ID, "refresh").click()
            time.sleep(1.0)
            try:
                driver.switch_to.frame(driver.find_element(By.ID, "flame"))
                names = driver.execute_script(
                    "return Array.from(document.getElementsByTagName('title'), t => t.textContent)"
                )
            except WebDriverException:
                return None  # the frame was still loading
            finally:
                driver.switch_to.default_content()
            return [n for n in names if n.startswith(probe + " (")] and names

        names = wait_for("the flamegraph to name the function", flame_names)
        if screenshot:
            driver.save_screenshot(screenshot)
        driver.find_element(By.ID, "stop").click()
        state = wait_for(
            "the page to say the capture stopped",
            lambda: (lambda t: t if t.startswith("stopped:") else None)(driver.find_element(By.ID, "state").text),
        )
        final = row_count(driver, probe)
        threads = driver.execute_script(
            """return Array.from(document.querySelectorAll('#threads tbody tr'), r =>
                 [Number(r.dataset.tid), r.cells[2].textContent,
                  Number(r.querySelector('td.calls').textContent.replaceAll(',', ''))]);"""
        )
        print(json.dumps({"counts": counts, "final_count": final, "flame_names": names[:50], "state": state,
                          "threads": threads}))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
