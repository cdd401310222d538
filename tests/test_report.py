"""`snakemake --report` of the config/ci.yaml run (the session's `pipeline_run`), opened in a real headless browser.

Snakemake's report is a JavaScript app, so the checks read what Chromium rendered, driven over the DevTools protocol
(`--remote-debugging-pipe`): the first page shows results/claims.md (its findings table, row by row, at the top of
the window), and each table of the paper, opened from the menu as a person would, shows every number of its .tex
in order. The expected values are read from the run's files, never typed here.

Needs Chromium (Debian: `apt-get install chromium`): skips, saying why, where it is not installed, and fails
instead with BUDGETDRAFT_REQUIRE_CHROMIUM=1 (.ci/run sets it when it could install Chromium).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from budgetdraft.report import artifacts, paper

NUMBER = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")  # a decimal as tables and claims print them
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]


def chromium_binary() -> str:
    found = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if found is None:
        why = "Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it where it can)"
        if os.environ.get("BUDGETDRAFT_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{why} (BUDGETDRAFT_REQUIRE_CHROMIUM=1)")
        pytest.skip(why)
    return found


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (fd 3 in, fd 4 out, NUL-terminated JSON)."""

    def __init__(self, binary: str, profile: Path):
        # the shell hands the browser our stdin / stdout as its fds 3 / 4
        command = " ".join([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe"])
        self.proc = subprocess.Popen(
            ["sh", "-c", f"exec {command} 3<&0 4>&1 0</dev/null 1>/dev/null"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id, self.buffer, self.session = 0, b"", None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        self.proc.stdin.write(json.dumps(message).encode() + b"\0")
        self.proc.stdin.flush()
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                assert chunk, f"Chromium closed the pipe (exit {self.proc.poll()})"
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]

    def js(self, expression: str, context: int | None = None):
        """The value of a JavaScript expression in the page (or in an isolated world of a frame)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        if context is not None:
            params["contextId"] = context
        result = self.call("Runtime.evaluate", **params)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, context: int | None = None):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = self.js(expression, context)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {expression}")

    def click(self, text: str, scope: str = "document") -> None:
        """Click the innermost visible element whose text is `text` (a menu entry), as a person would."""
        clicked = self.js(
            f"""(() => {{
              const el = [...{scope}.querySelectorAll("a, li, button, td, span, div")].filter(
                e => e.offsetParent !== null && e.innerText && e.innerText.trim() === {json.dumps(text)}).pop();
              if (el) el.click();
              return !!el;
            }})()"""
        )
        assert clicked, f"nothing to click named {text!r}"

    def frame_text(self, timeout: float = 30.0) -> str:
        """The rendered text of the report's content frame (a result page in its iframe)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            children = self.call("Page.getFrameTree")["frameTree"].get("childFrames", [])
            if children:
                world = self.call("Page.createIsolatedWorld", frameId=children[0]["frame"]["id"])
                text = self.js("document.body ? document.body.innerText : ''", world["executionContextId"])
                if text:
                    return text
            time.sleep(0.2)
        raise AssertionError("no result page opened in the content frame")

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_binary()


@pytest.fixture(scope="module")
def report(chromium, pipeline_run):  # Chromium first: without it, skip before any pipeline run
    """`snakemake --report report.html --configfile config/ci.yaml` after the session's ci run."""
    out = pipeline_run / "report.html"
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--report", str(out), "--configfile", "config/ci.yaml"],
        cwd=pipeline_run,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return out


@pytest.fixture
def browser(chromium, report, tmp_path):
    page = Browser(chromium, tmp_path / "profile")
    page.call("Page.navigate", url=report.as_uri())
    page.wait_for("document.querySelector('.budgetdraft-claims') !== null")
    yield page
    page.close()


def findings_table(claims_md: str) -> tuple[list[str], list[list[str]]]:
    """claims.md's findings table (under '## Findings'): its header and rows, each as its cells' markdown."""
    section = claims_md.split("## Findings", 1)[1].split("\n## ", 1)[0]
    lines = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("|")]
    return lines[0], lines[2:]  # past the |---| line


@pytest.mark.pipeline
def test_the_first_page_is_the_claims(browser, pipeline_run):
    header, rows = findings_table((pipeline_run / "results/claims.md").read_text())
    findings = json.loads((pipeline_run / "results/claims.json").read_text())["findings"]
    assert [row[0] for row in rows] == [f["id"] for f in findings]
    shown = browser.js(
        "[...document.querySelector('.budgetdraft-claims table').rows].map(r => [...r.cells].map(c => c.innerText))"
    )
    assert shown[0] == header and len(shown) == 1 + len(rows), (shown, header, rows)
    verdict = header.index("verdict")
    for seen, row, finding in zip(shown[1:], rows, findings):
        assert seen[0] == finding["id"] and seen[verdict] == finding["verdict"], (seen, finding)
        assert NUMBER.findall(" ".join(seen)) == NUMBER.findall(" ".join(row)), (seen, row)
    # what a person sees first, without scrolling: the claims' title and findings, at the top of the window
    top = browser.js(
        "(() => { const h = document.querySelector('.budgetdraft-claims h1');"
        " return [h.innerText, h.getBoundingClientRect().top, window.innerHeight]; })()"
    )
    assert top[0] == (pipeline_run / "results/claims.md").read_text().splitlines()[0].lstrip("# ")
    assert 0 <= top[1] < top[2] / 4, top


@pytest.mark.pipeline
def test_every_table_is_rendered_with_the_numbers_of_its_tex(browser, pipeline_run):
    tables = [key for key, a in paper.ARTIFACTS.items() if a.kind == "table" and a.in_all == artifacts.ALWAYS]
    for artifact in tables:
        browser.click("Tables")
        browser.wait_for("document.body.innerText.includes('Rendered')")
        browser.click("Rendered")
        # the entry labelled with the artifact (and its paper name): its first button opens the rendered page
        browser.wait_for(
            f"""(() => {{
              const row = [...document.querySelectorAll("tr")].find(
                r => r.cells.length && r.cells[0].innerText.trim() === {json.dumps(artifact)});
              const view = row && row.querySelector("a");
              if (view) view.click();
              return !!view;
            }})()"""
        )
        text = browser.frame_text()
        tex = (pipeline_run / "results/tables" / f"{artifact}.tex").read_text()
        shown = [line for line in tex.splitlines() if not line.startswith((r"\setlength", r"\renew", r"\vspace"))]
        expected = NUMBER.findall("\n".join(shown))  # every entry, in the order of the table, then the caption's
        assert expected and NUMBER.findall(text) == expected, (artifact, text[:2000])
        browser.call("Page.reload")
        browser.wait_for("document.querySelector('.budgetdraft-claims') !== null")


HOSTILE = "</script><img src=x onerror=\"document.title='ran'\"><script>window.ran = 1</script>"


@pytest.fixture(scope="module")
def hostile_report(chromium, pipeline_run, tmp_path_factory):
    """The session's ci run, reported with a dataset whose display name is a script, and the plan-time refusals of
    markup in names and of long names (the second wall) lifted in this copy: what the report does with the name is
    the first wall."""
    work = tmp_path_factory.mktemp("hostile")

    def link_or_copy(src, dst):  # results are only read: linked; Snakemake's own folder is copied (it writes there)
        return shutil.copy2(src, dst) if "/.snakemake/" in src else os.link(src, dst)

    shutil.copytree(pipeline_run, work, dirs_exist_ok=True, copy_function=link_or_copy, symlinks=True)
    for name in ("src", "workflow"):  # our code, replaced by real copies before it is edited
        target = work / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        (shutil.copytree if (pipeline_run / name).is_dir() else shutil.copy)(pipeline_run / name, target)
    check = work / "src/budgetdraft/pipeline/configcheck.py"
    lifted = re.sub(r"(?m)^MARKUP = .*$", "MARKUP = set()", check.read_text())
    check.write_text(re.sub(r"(?m)^TITLE_LENGTH = .*$", "TITLE_LENGTH = 1000", lifted))  # the name is 82 characters
    config = (work / "config/ci.yaml").read_text().replace('name: "GS"', f"name: {json.dumps(HOSTILE)}")
    (work / "hostile.yaml").write_text(config)
    out = work / "report.html"
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--report", str(out), "--configfile", "hostile.yaml"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return out


@pytest.mark.pipeline
def test_a_name_holding_a_script_runs_nothing_in_the_report(chromium, hostile_report, tmp_path):
    """Snakemake embeds each report item's job params verbatim inside an inline <script>: no free text may be there
    (settings reach their jobs as files). The page loads, no element carries an on* handler, no script of the name
    ran; and the name is shown as text where tables show it."""
    page = Browser(chromium, tmp_path / "profile")
    try:
        page.call("Page.navigate", url=hostile_report.as_uri())
        page.wait_for("document.querySelector('.budgetdraft-claims') !== null")
        handlers = page.js(
            "[...document.querySelectorAll('*')].flatMap(e => [...e.attributes].filter(a => a.name.startsWith('on'))"
            ".map(a => e.tagName + ' ' + a.name))"
        )
        assert handlers == [], handlers
        assert page.js("window.ran === undefined && document.title !== 'ran'"), page.js("document.title")
        assert HOSTILE not in page.js("document.documentElement.innerHTML").replace("\\/", "/")
    finally:
        page.close()
