"""Drives the GPU charts of xtrace's live view in Debian's headless Chromium (chromedriver +
selenium), for tests/tests/live_gpu.rs. Prints JSON lines on stdout.

Usage: live_gpu_page.py live URL PID FINAL_BYTES [SCREENSHOT.png]
  Opens the page, prints {"watching": true} once the GPU charts are shown, then records each new
  last value of process PID's series in the NVML memory chart ("traced processes' memory
  (bytes)") and the CUDA memory chart, until a line on stdin says the test is done and both
  charts end at FINAL_BYTES; then clicks Stop, waits for the page to say the capture stopped and
  prints {"nvml_steps": [...], "cuda_steps": [...], "charts": {...}, "state": "..."}, where charts
  is {GPU: {TRACK: {SERIES: LAST VALUE}}} of the last snapshot (GPU: the index, or "cuda").
Usage: live_gpu_page.py view URL
  Opens the page of `xtrace view`, prints {"charts": {...}} as above and clicks Close.
"""
import json
import os
import sys
import tempfile
import threading
import time

os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not look for drivers on the network

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1400",
]

NVML_MEMORY = "traced processes' memory (bytes)"
CUDA_MEMORY = "CUDA device memory (bytes)"

# Read in one script: the charts are rebuilt at every snapshot.
CHARTS = """
const out = {};
for (const g of document.querySelectorAll('#gpus .gpu')) {
  const charts = {};
  for (const f of g.querySelectorAll('figure.chart')) {
    const series = {};
    for (const li of f.querySelectorAll('li'))
      series[li.dataset.series] = Number(li.querySelector('.last').dataset.last);
    charts[f.dataset.track] = series;
  }
  out[g.dataset.gpu] = charts;
}
return out;
"""


def wait_for(what, check, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def say(obj):
    print(json.dumps(obj), flush=True)


def charts(driver):
    return driver.execute_script(CHARTS)


def memory(shown, pid):
    """The last values of PID in the NVML (GPU 0) and CUDA memory charts (None where absent)."""
    series = f"pid {pid}"
    nvml = shown.get("0", {}).get(NVML_MEMORY, {}).get(series)
    cuda = shown.get("cuda", {}).get(CUDA_MEMORY, {}).get(series)
    return nvml, cuda


def live(driver, pid, final):
    wait_for("the GPU charts", lambda: driver.find_element(By.ID, "gpu").is_displayed())
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), done.set()), daemon=True).start()
    say({"watching": True})
    nvml_steps, cuda_steps = [], []
    deadline = time.time() + 60
    while time.time() < deadline:
        nvml, cuda = memory(charts(driver), pid)
        for steps, value in ((nvml_steps, nvml), (cuda_steps, cuda)):
            if value is not None and (not steps or steps[-1] != value):
                steps.append(value)
        if done.is_set() and nvml == final and cuda == final:
            break
        time.sleep(0.2)
    else:
        raise SystemExit(f"the charts did not end at {final}: {nvml_steps} {cuda_steps}")
    driver.find_element(By.ID, "stop").click()
    state = wait_for(
        "the page to say the capture stopped",
        lambda: (lambda t: t if t.startswith("stopped:") else None)(driver.find_element(By.ID, "state").text),
    )
    say({"nvml_steps": nvml_steps, "cuda_steps": cuda_steps, "charts": charts(driver), "state": state})


def view(driver):
    shown = wait_for("the GPU charts", lambda: charts(driver))
    say({"charts": shown})
    driver.find_element(By.ID, "stop").click()


def main():
    mode, url = sys.argv[1], sys.argv[2]
    profile = tempfile.mkdtemp(prefix="xtrace-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        if mode == "live":
            live(driver, int(sys.argv[3]), float(sys.argv[4]))
            if len(sys.argv) > 5:
                driver.execute_script("document.getElementById('gpu').scrollIntoView()")
                driver.save_screenshot(sys.argv[5])
        else:
            view(driver)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
