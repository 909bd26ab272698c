"""Reads the thread table of xtrace's live view (or `xtrace view`'s page) in Debian's headless
Chromium, for tests/tests/live_rows.rs: opens the URL xtrace printed (token included), waits for
thread TID's row, with `stop` clicks Stop and waits for the page to say the capture stopped, then
prints one JSON object on stdout: {"offcpu_headers": N (off-CPU column headers shown),
"row": {CLASS: {"text": ..., "ns": N or null}}} for the row's off-CPU cells (blocked10,
runnable10, blocked, runnable).

Usage: page_threads.py URL TID stop|view
"""
import json
import sys
import tempfile

from live_page import FLAGS, wait_for  # first: it keeps selenium off the network

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

CELLS = ["blocked10", "runnable10", "blocked", "runnable"]


def main():
    url, tid, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    profile = tempfile.mkdtemp(prefix="xtrace-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    row_script = """const row = document.querySelector('#threads tbody tr[data-tid="' + arguments[0] + '"]');
        if (!row) return null;
        const out = {};
        for (const cls of arguments[1]) {
          const td = row.querySelector('td.' + cls);
          out[cls] = td ? {text: td.textContent, ns: td.dataset.ns === undefined ? null : Number(td.dataset.ns)} : null;
        }
        return out;"""
    try:
        driver.get(url)
        wait_for(f"thread {tid}'s row", lambda: driver.execute_script(row_script, tid, CELLS))
        if mode == "stop":
            driver.find_element(By.ID, "stop").click()
            wait_for(
                "the page to say the capture stopped",
                lambda: driver.find_element(By.ID, "state").text.startswith("stopped:"),
            )
        headers = driver.execute_script(
            "return Array.from(document.querySelectorAll('#threads th.offcpu')).filter(th => !th.hidden).length;"
        )
        print(json.dumps({"offcpu_headers": headers, "row": driver.execute_script(row_script, tid, CELLS)}))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
