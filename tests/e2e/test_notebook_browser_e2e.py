"""Issue 27 in a real browser: a headless Chromium (Debian's `chromium` and `chromium-driver`,
driven by selenium) uses a workspace's JupyterLab through the local runtime's tunnel as a
researcher would: open JupyterLab, create a notebook, run a cell that writes a file, save;
type an edit and do NOT save it; `respot local interrupt` the workspace; the page saves the edit
in the supervisor's save window after the notice (its autosave; by hand if JupyterLab has
stretched its autosave past half the window, as it does after a busy machine's slow save); once
the replacement answers, reload the page: the notebook (with its saved output and that edit)
and the file are there, the kernel is a new one (the variable the cell set is gone), and the
note in the workspace says why.

A screenshot of each step is kept under `$RESPOT_TEST_ARTIFACTS/notebook-browser/` (default
`build/test-artifacts/notebook-browser/` in the checkout, gitignored); the path is printed.
Without Chromium or its driver the test is skipped, saying how to enable it; `.ci/run` installs
both. Every wait is for an event (an element, an answer of Jupyter's API) under a generous cap.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from infra.local.fleet import FleetTiming
from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.job import AttemptEnd
from respot.workspace import names, ops
from respot.workspace.tokens import ENV_DIR
from tests.e2e.helpers import job_story, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ENABLE = (
    "enable it with `apt-get install -y chromium chromium-driver` (Debian's packages, as root; "
    ".ci/run installs them) and selenium from requirements.txt"
)
CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    missing = " and ".join(
        n for n, p in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if p is None
    )
    pytest.skip(f"no headless browser: {missing} not found; {ENABLE}", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason=f"selenium is not installed; {ENABLE}")
pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (requirements.txt)")

from selenium.common.exceptions import (  # noqa: E402
    ElementClickInterceptedException,
    ElementNotInteractableException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

# EC2's notice lasts its real two minutes here (the rest of the runtime's time is scaled): the
# save window after it (what it leaves before the agent's kill, less the shutdown: about 75 s)
# outlasts the page's autosave interval even as a loaded machine's slow saves stretch it
# (JupyterLab waits 10 times a save's duration).
SCALE = 1.0 / 30.0
NOTICE_SECONDS = 120.0 / SCALE
AUTOSAVE_SECONDS = 6  # JupyterLab's autosave interval in this workspace (its settings)
UP_SECONDS = 420.0  # bound: an instance boots, the agent prepares, JupyterLab starts
STEP_SECONDS = 240.0  # bound of one browser step (a kernel starting on a busy machine)
NOTEBOOK = "kept.ipynb"
MADE = "made-in-cell.txt"
CELL = f'x = 41; open("{MADE}", "w").write("kept"); print("wrote it")'
AFTER = 'print("x is", "still set" if "x" in globals() else "gone")'
IDLE = '.jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status="idle"]'
AUTOSAVED = "  # an edit the autosave took"  # typed after the save, then autosaved
UNSAVED = " and one typed after it"  # typed right after that autosave: unsaved at the notice
RERUNS = 3  # a dropped run asked again (not a failure of respot: JupyterLab's behaviour)
UNRUN_SECONDS = 5.0  # how long an unrun cell beside an idle kernel counts as dropped


def artifacts() -> Path:
    root = os.environ.get("RESPOT_TEST_ARTIFACTS")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
    out = base / "notebook-browser"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.png"):
        old.unlink()
    return out


@pytest.fixture(scope="module")
def rt() -> Iterator[LocalRuntime]:
    options = RuntimeOptions(
        time_scale=SCALE,
        timing=FleetTiming(notice_seconds=NOTICE_SECONDS),
        chaos=ChaosSchedule(job_ids=set()),
        # The replacement restores only once the noticed attempt wrote its last snapshot (its
        # hand-off marker), or after this wait: as on AWS (150 s for a 120-s notice), it must
        # outlast the notice, which the runtime would scale down (5 s) but not the notice.
        agent_env={"RESPOT_HANDOFF_WAIT_SECONDS": f"{(NOTICE_SECONDS + 30) * SCALE:.3f}"},
        # ... and the control plane must not judge the waiting replacement lost meanwhile
        boot_timeout_seconds=1200.0 + NOTICE_SECONDS,
        heartbeat_timeout_seconds=600.0 + NOTICE_SECONDS,
    )
    with LocalRuntime(options) as r:
        yield r


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="respot-chromium-")
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(STEP_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


class Jupyter:
    """Jupyter's REST API through the tunnel, with the token of the page's URL."""

    def __init__(self, link: str) -> None:
        parts = urlparse(link)
        self.base = f"{parts.scheme}://{parts.netloc}"
        self.token = parse_qs(parts.query)["token"][0]

    def get(self, path: str) -> Any:
        request = urllib.request.Request(
            f"{self.base}{path}", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read().decode() or "null")

    def answers(self, path: str) -> bool:
        try:
            self.get(path)
        except (OSError, ValueError):  # 503 from the tunnel while the workspace moves
            return False
        return True

    def text(self, name: str) -> str | None:
        try:
            found = self.get(f"/api/contents/{name}?content=1&format=text&type=file")
        except (OSError, ValueError):
            return None
        return str(found.get("content")) if isinstance(found, dict) else None

    def kernel_of(self, notebook: str) -> str | None:
        for session in self.get("/api/sessions"):
            if session.get("path") == notebook and session.get("kernel"):
                return str(session["kernel"]["id"])
        return None


class Steps:
    """The browser, each wait bounded by an event, a screenshot per step."""

    def __init__(self, driver: WebDriver, out: Path) -> None:
        self.driver, self.out, self.shots = driver, out, 0

    def shot(self, name: str) -> Path:
        self.shots += 1
        path = self.out / f"{self.shots:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def until(self, what: str, check: Callable[[WebDriver], Any]) -> Any:
        try:
            return WebDriverWait(self.driver, STEP_SECONDS, poll_frequency=0.25).until(check)
        except WebDriverException as exc:
            failed = self.shot("failed-" + what.replace(" ", "-")[:40])
            raise AssertionError(f"{what}: not within {STEP_SECONDS}s (see {failed})") from exc

    def all(self, css: str) -> list[WebElement]:
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def outputs(self) -> list[str]:
        return [e.text for e in self.all(".jp-NotebookPanel .jp-OutputArea-output")]

    def click(self, what: str, css: str, *, last: bool = False, double: bool = False) -> None:
        """Click the (first or last) element `css` finds once it can take a click: JupyterLab
        renders a new panel's elements before they are visible."""

        def clicked(driver: WebDriver) -> bool:
            found = driver.find_elements(By.CSS_SELECTOR, css)
            if not found:
                return False
            element = found[-1] if last else found[0]
            try:
                if double:
                    ActionChains(driver).double_click(element).perform()
                else:
                    element.click()
            except (
                ElementClickInterceptedException,
                ElementNotInteractableException,
                StaleElementReferenceException,
            ):
                return False
            return True

        self.until(what, clicked)

    def run_in_last_cell(self, code: str, expect: str) -> int:
        """Type `code` into the notebook's last cell, run it once its kernel is idle, and wait
        for an output holding `expect`. JupyterLab drops (does not queue) a run asked while
        the notebook's session has no kernel attached: a cell left unrun ("[ ]:") for a few
        seconds with the kernel idle is run again, at most RERUNS times. Returns how many."""
        cells = ".jp-NotebookPanel .jp-Notebook .jp-Cell"
        self.until("the notebook's kernel idle", lambda d: d.find_elements(By.CSS_SELECTOR, IDLE))
        index = len(self.all(cells)) - 1
        self.click("a cell's editor", f"{cells} .cm-content", last=True)
        ActionChains(self.driver).send_keys(code).perform()
        keys = ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER)
        keys.key_up(Keys.SHIFT).perform()
        again, unrun_since = 0, None

        def ran(driver: WebDriver) -> bool:
            nonlocal again, unrun_since
            if any(expect in text for text in self.outputs()):
                return True
            cell = driver.find_elements(By.CSS_SELECTOR, cells)[index]
            prompt = cell.find_element(By.CSS_SELECTOR, ".jp-InputPrompt").text.strip()
            if prompt != "[ ]:" or not driver.find_elements(By.CSS_SELECTOR, IDLE):
                unrun_since = None
                return False
            unrun_since = unrun_since or time.monotonic()
            if again < RERUNS and time.monotonic() - unrun_since > UNRUN_SECONDS:
                cell.find_element(By.CSS_SELECTOR, ".cm-content").click()
                run = ActionChains(driver).key_down(Keys.CONTROL).send_keys(Keys.ENTER)
                run.key_up(Keys.CONTROL).perform()
                again, unrun_since = again + 1, None
            return False

        self.until(f"the output {expect!r}", ran)
        if again:
            print(f"the cell was run {again} more time(s): its first run was dropped")
        return again

    def listed(self, name: str) -> WebElement | None:
        """The file browser's item for `name` (its title: "Name: <name>\nSize: ...")."""
        for item in self.all(".jp-DirListing-item"):
            with contextlib.suppress(StaleElementReferenceException):
                if (item.get_attribute("title") or "").split("\n")[0] == f"Name: {name}":
                    return item
        return None


SAID = ("respot workspace", "Saving file at", "[W ", "[E ")  # the supervisor's, Jupyter's


def supervisor_said(rt: LocalRuntime, job_id: str, instance_id: str | None = None) -> list[str]:
    """The lines of the job's log (`session.log` in each of its instance roots, or only
    `instance_id`'s) that its workspace supervisor and its Jupyter wrote (SAID)."""
    assert rt.fleet is not None
    lines = []
    for inst in rt.fleet.of_job(job_id):
        root = inst.root.path if inst.root is not None else None
        if root is None or not root.exists() or instance_id not in (None, inst.instance_id):
            continue
        for log in sorted(root.rglob("session.log")):
            text = log.read_text(errors="replace").splitlines()
            lines += [f"{inst.instance_id}: {ln}" for ln in text if any(m in ln for m in SAID)]
    return lines


def save_window(rt: LocalRuntime, job_id: str, instance_id: str) -> float | None:
    """The save window the noticed instance's supervisor opened (its seconds), once it said
    so; fails at once if it said it opened none."""
    for line in supervisor_said(rt, job_id, instance_id):
        if "no save window" in line:
            raise AssertionError(f"the supervisor opened no save window: {line}")
        if found := re.search(r"JupyterLab serves (\d+) s more", line):
            return float(found.group(1))
    return None


def story(rt: LocalRuntime, job_id: str, browser: WebDriver) -> str:
    """What a failure prints (CI's log is all a reader gets): the job's story, what each
    instance's workspace supervisor said (its save window) and when its Jupyter saved, and
    the page's console (an autosave's error, a connection it lost)."""
    lines = [job_story(rt, job_id), "the workspace supervisors and their Jupyter said:"]
    lines += [f"  | {ln}" for ln in supervisor_said(rt, job_id)[-60:]]
    with contextlib.suppress(WebDriverException):
        console = browser.get_log("browser")
        lines.append(f"the page's console (last {min(len(console), 40)} of {len(console)}):")
        lines += [f"  | {e.get('level')} {e.get('message', '')[:300]}" for e in console[-40:]]
    return "\n".join(lines)


def test_a_notebook_and_its_file_survive_an_interruption_in_a_real_browser(
    rt: LocalRuntime,
    browser: WebDriver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = artifacts()
    print(f"notebook-browser screenshots: {out}")
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "tokens"))
    deployment, session = rt.sdk_deployment(), rt.researcher_session()
    started = ops.start(
        deployment, session, "browser", local=True, settings={"autosave_seconds": AUTOSAVE_SECONDS}
    )
    job_id = started.job_id
    wait_for(lambda: rt.job_record(job_id) is not None, 60, "the job's record")
    tunnel, link = ops.open_local(deployment, session, "browser", rt.work_root)
    api, steps = Jupyter(link), Steps(browser, out)
    with tunnel:
        wait_for(lambda: api.answers("/api/status"), UP_SECONDS, "JupyterLab via the tunnel")

        # 1. JupyterLab opens in the browser, through the tunnel on the laptop's 127.0.0.1
        browser.get(link)
        card = '.jp-LauncherCard[data-category="Notebook"]'
        steps.until("the launcher", lambda d: d.find_elements(By.CSS_SELECTOR, card))
        steps.shot("jupyterlab-open")

        # 2. a new notebook; a cell sets a variable and writes a file into the workspace
        steps.click("the notebook card", card)
        steps.run_in_last_cell(CELL, "wrote it")
        assert api.text(MADE) == "kept"  # the file is in the workspace, on the instance
        steps.shot("cell-ran")

        # 3. save (JupyterLab asks for a name on a notebook's first save)
        ActionChains(browser).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
        name = steps.until(
            "the name dialog",
            lambda d: (
                d.find_elements(By.CSS_SELECTOR, ".jp-Dialog input.jp-mod-styled")
                or d.find_elements(By.CSS_SELECTOR, ".jp-Dialog input")
            ),
        )[0]
        name.send_keys(Keys.CONTROL, "a")
        name.send_keys(NOTEBOOK)
        steps.click("the dialog's Rename", ".jp-Dialog .jp-mod-accept")
        steps.until("the saved notebook", lambda d: MADE in (api.text(NOTEBOOK) or ""))
        saved = json.loads(api.text(NOTEBOOK) or "{}")
        assert any("wrote it" in json.dumps(c.get("outputs", [])) for c in saved["cells"])
        # The page moves its kernel's session to the new name by a request of its own, after
        # the save: wait for it, as for every other step (on a busy machine it comes later).
        first_kernel = steps.until(
            "the kernel's session renamed", lambda d: api.kernel_of(NOTEBOOK)
        )
        steps.shot("saved")

        # 3b. an edit typed into the first cell, not saved. Typed right after an autosave
        # (seen on disk), so the next one is an autosave interval away: the notice comes
        # while it is unsaved, and only the save window after the notice can keep it.
        first_cell = ".jp-NotebookPanel .jp-Notebook .jp-Cell .cm-content"
        steps.click("the first cell's editor", first_cell)
        end = ActionChains(browser).key_down(Keys.CONTROL).send_keys(Keys.END)
        end.key_up(Keys.CONTROL).perform()
        ActionChains(browser).send_keys(AUTOSAVED).perform()
        steps.until(
            "the autosave of the first edit", lambda d: AUTOSAVED in (api.text(NOTEBOOK) or "")
        )
        ActionChains(browser).send_keys(UNSAVED).perform()
        steps.until(
            "the edit on the page",
            lambda d: UNSAVED.strip() in d.find_element(By.CSS_SELECTOR, first_cell).text,
        )
        assert UNSAVED not in (api.text(NOTEBOOK) or ""), "the edit was saved before the notice"
        steps.shot("typed-not-saved")

        # 4. the workspace's spot instance is interrupted (`respot local interrupt`); its
        # supervisor snapshots the workspace and keeps JupyterLab serving for the save window
        first_server = api.get("/api/status")["started"]
        first = rt.interrupt_job(job_id, wait_seconds=120)
        window: list[float] = []

        def opened() -> bool:
            seconds = save_window(rt, job_id, first.instance_id)
            if seconds is not None:
                window.append(seconds)
            return seconds is not None

        try:
            wait_for(opened, NOTICE_SECONDS * SCALE, "the save window")
            # 4b. within the window the page saves the edit through the tunnel, which still
            # reaches the noticed instance: by its autosave, unless JupyterLab has stretched
            # that past half the window (to 10 times its last save's duration: a busy
            # machine's slow save, docs/limitations.md), then by hand (Ctrl-S), as the docs
            # advise. Either way it is the page's own save; the window must keep it.
            half = time.monotonic() + window[0] / 2
            while time.monotonic() < half and UNSAVED not in (api.text(NOTEBOOK) or ""):
                time.sleep(0.25)
            if UNSAVED not in (api.text(NOTEBOOK) or ""):
                print(f"no autosave within half the {window[0]:.0f}-s window: saving by hand")
                save = ActionChains(browser).key_down(Keys.CONTROL).send_keys("s")
                save.key_up(Keys.CONTROL).perform()
            steps.until(
                "the page's save in the window", lambda d: UNSAVED in (api.text(NOTEBOOK) or "")
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{story(rt, job_id, browser)}") from exc

        def replacement_serves() -> bool:
            """Attempt 2 is current and its JupyterLab answers through the tunnel (the first
            one serves on through its save window: another server's start time)."""
            record = rt.job_record(job_id)
            current = record.current if record else None
            if not (current and current.number == 2 and api.answers("/api/status")):
                return False
            with contextlib.suppress(OSError, ValueError):
                return bool(api.get("/api/status")["started"] != first_server)
            return False

        wait_for(replacement_serves, UP_SECONDS + NOTICE_SECONDS * SCALE, "the replacement")

        def first_ended() -> bool:  # its agent's last word reaches the control plane by SQS
            record = rt.job_record(job_id)
            return bool(record and record.attempts[0].end is not None)

        with contextlib.suppress(AssertionError):  # if not, the assertion below tells the story
            wait_for(first_ended, UP_SECONDS, "attempt 1's end")
        record = rt.job_record(job_id)
        assert record is not None and first.attempt == 1
        assert record.attempts[0].end is AttemptEnd.INTERRUPTED, job_story(rt, job_id)
        assert record.current is not None and record.current.instance_id != first.instance_id
        steps.shot("interrupted-replacement-up")

        # 5. reload: the same URL reaches the replacement; the notebook (its saved output, and
        # the edit the autosave wrote after the notice) and the file are there, and so is the
        # note saying why
        console_before = story(rt, job_id, browser)  # the page's console before the reload
        browser.refresh()
        try:
            steps.until(
                "the notebook after the reload",
                lambda d: (
                    "wrote it" in steps.outputs()
                    and MADE in d.find_element(By.CSS_SELECTOR, first_cell).text
                ),
            )
            steps.until(
                "the unsaved edit after the reload",
                lambda d: UNSAVED.strip() in d.find_element(By.CSS_SELECTOR, first_cell).text,
            )
            assert AUTOSAVED + UNSAVED in (api.text(NOTEBOOK) or "")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nbefore the reload:\n{console_before}") from exc
        for listed in (NOTEBOOK, MADE, names.NOTE_FILE):
            steps.until(f"{listed} in the file browser", lambda d, n=listed: steps.listed(n))
        assert api.text(MADE) == "kept"
        steps.shot("reloaded")

        # 6. the kernel is a new one: the variable the cell set before is gone
        steps.run_in_last_cell(AFTER, "x is ")
        assert "x is gone" in steps.outputs()
        assert "x is still set" not in steps.outputs()
        steps.until("the new kernel", lambda d: api.kernel_of(NOTEBOOK) not in (None, first_kernel))
        steps.shot("kernel-restarted")

        # 7. the page says why: the note the replacement wrote into the workspace
        note = f'.jp-DirListing-item[title^="Name: {names.NOTE_FILE}"]'
        steps.click("the note in the file browser", note, double=True)
        steps.until(
            "the note",
            lambda d: any(
                "Variables are gone; files are kept" in e.text
                for e in d.find_elements(By.CSS_SELECTOR, ".jp-FileEditor .cm-content")
            ),
        )
        steps.shot("why")
    ops.stop(deployment, session, "browser")
    shots = sorted(p.name for p in out.glob("*.png"))
    assert len(shots) == 8 and not [s for s in shots if "failed" in s], shots
    print(f"notebook-browser screenshots: {out} ({', '.join(shots)})")
