"""A page opened in a real headless Chromium (Debian's `chromium`), for the tests of the html
reports: what it drew (a PNG screenshot), its DOM after loading, every console error and
exception, and every request it tried to make beyond the file itself.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
messages ended by a NUL byte on file descriptors 3 and 4), so the tests need no websocket
package and no port. Every request is intercepted (Fetch domain): one for a file:// or data:
URL is let through, any other is refused and counted, so a page that reaches for the network
fails its test without waiting for a host to answer, and without reaching one. A proxy that
does not exist is set as well, should anything slip past the interception.

    page = open_page(path, width=1280)
    page.requests, page.console_errors, page.dom, page.png, page.tables
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (apt-get install chromium; .ci/run installs it "
    "where it runs as root on Debian)",
)

# The browser's own traffic (updates, sync, field trials, ...) is switched off; what is left
# would not come from the page, and the interception counts only the page's requests.
_FLAGS = [
    "--headless",
    "--remote-debugging-pipe",
    "--no-sandbox",  # root in CI containers; the page is the test's own file
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--mute-audio",
    "--hide-scrollbars",
    "--proxy-server=http://127.0.0.1:9",  # a port nothing listens on
    "--proxy-bypass-list=<-loopback>",
]
# What a table's cells hold as the reader sees them (a <br> as a line break).
_TABLES_JS = (
    "JSON.stringify([...document.querySelectorAll('table')].map(t => [...t.rows].map("
    "r => [...r.cells].map(c => c.innerText))))"
)


@dataclass
class OpenedPage:
    png: bytes  # the screenshot, the page's whole height at the window's width
    dom: str  # document.documentElement.outerHTML after the load event
    tables: list[list[list[str]]]  # per <table>, its rows' cells' innerText
    width: int  # the viewport's width
    scroll_width: int  # how wide the document is: more than `width` scrolls sideways
    seconds: float  # from navigation to the load event
    requests: list[str] = field(default_factory=list)  # URLs beyond file: and data:
    # Errors and exceptions, and any dialog (alert(): a script ran that should not have)
    console_errors: list[str] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)  # every SVG <title>'s text
    headings: list[str] = field(default_factory=list)  # every <h2>'s and <h3>'s, as read


class _Pipe:
    """The DevTools protocol over Chromium's pipe: commands out, events and replies in."""

    def __init__(self, process: subprocess.Popen, to_browser: int, from_browser: int):
        self.process = process
        self.to_browser = to_browser
        self.from_browser = from_browser
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []  # every event since the last clear
        self.session: str | None = None  # the page's, once attached

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        return self.next_id

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        wanted = self.send(method, params, session)
        while True:
            message = self.receive()
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def receive(self, deadline: float = 60.0) -> dict:
        end = time.monotonic() + deadline
        while b"\0" not in self.buffer:
            if time.monotonic() > end:
                raise TimeoutError("chromium sent nothing for a minute")
            ready, _, _ = select.select([self.from_browser], [], [], max(end - time.monotonic(), 0))
            if not ready:
                continue
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed its pipe (exit {self.process.poll()})")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def wait_for(self, method: str) -> dict:
        """Events until the page's `method` arrives."""
        while True:
            for event in self.events:
                if event.get("method") == method and event.get("sessionId") == self.session:
                    return event
            self._event(self.receive())

    def _event(self, message: dict) -> None:
        """Keep an event; a paused request goes on (a file or data URL) or is refused (any
        other), whenever it arrives."""
        self.events.append(message)
        if message.get("method") == "Page.javascriptDialogOpening":  # alert() waits for this
            self.send("Page.handleJavaScriptDialog", {"accept": True}, self.session)
        if message.get("method") != "Fetch.requestPaused":
            return
        params = message["params"]
        if params["request"]["url"].startswith(("file:", "data:")):
            self.send("Fetch.continueRequest", {"requestId": params["requestId"]}, self.session)
        else:
            self.send(
                "Fetch.failRequest",
                {"requestId": params["requestId"], "errorReason": "BlockedByClient"},
                self.session,
            )


def open_page(path: Path, width: int = 1280, height: int = 900) -> OpenedPage:
    """Load `path` in headless Chromium at `width` CSS pixels and read back what it did."""
    assert CHROMIUM is not None
    profile = tempfile.mkdtemp(prefix="mpbench-chromium-")
    to_r, to_w = os.pipe()  # our writes -> chromium's fd 3
    from_r, from_w = os.pipe()  # chromium's fd 4 -> our reads

    def child_fds() -> None:  # in the child, before exec: the pipe's ends at 3 and 4
        read_end, write_end = os.dup(to_r), os.dup(from_w)  # neither may be 3 or 4 now
        os.dup2(read_end, 3)
        os.dup2(write_end, 4)

    process = subprocess.Popen(
        [CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=child_fds,
        pass_fds=(3, 4),  # kept open past the exec (preexec_fn runs before the closing)
    )
    os.close(to_r)
    os.close(from_w)
    pipe = _Pipe(process, to_w, from_r)
    try:
        return _load(pipe, path.resolve().as_uri(), width, height)
    finally:
        try:
            pipe.send("Browser.close")
            process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
        os.close(to_w)
        os.close(from_r)
        shutil.rmtree(profile, ignore_errors=True)


def _load(pipe: _Pipe, url: str, width: int, height: int) -> OpenedPage:
    target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    attached = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})
    session = pipe.session = attached["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        pipe.call(f"{domain}.enable", session=session)
    pipe.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session)
    pipe.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        session,
    )
    pipe.events.clear()
    start = time.monotonic()
    pipe.call("Page.navigate", {"url": url}, session)
    pipe.wait_for("Page.loadEventFired")
    seconds = time.monotonic() - start

    def evaluate(expression: str):
        result = pipe.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session
        )
        return result["result"]["value"]

    dom = evaluate("document.documentElement.outerHTML")
    tables = json.loads(evaluate(_TABLES_JS))
    titles = evaluate("[...document.querySelectorAll('svg title')].map(t => t.textContent)")
    headings = evaluate("[...document.querySelectorAll('h2, h3')].map(h => h.innerText)")
    scroll_width = evaluate("document.documentElement.scrollWidth")
    shot = pipe.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                     session)  # fmt: skip
    opened = OpenedPage(base64.b64decode(shot["data"]), dom, tables, width, scroll_width, seconds)
    opened.titles, opened.headings = titles, headings
    _read_events(pipe.events, session, opened)
    return opened


def _read_events(events: list[dict], session: str, opened: OpenedPage) -> None:
    for event in events:
        if event.get("sessionId") != session:
            continue
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(("file:", "data:")):
                opened.requests.append(url)
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            opened.console_errors.append(f"exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            said = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            opened.console_errors.append(f"console.{params['type']}: {said}")
        elif method == "Page.javascriptDialogOpening":
            opened.console_errors.append(f"dialog: {params['type']}: {params['message']}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            opened.console_errors.append(f"log: {params['entry']['text']}")


def png_colours(png: bytes, most: int = 3) -> int:
    """How many distinct colours the screenshot has (counted up to `most`): 1 is blank."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=most)
    return most if colours is None else len(colours)  # None: more than `most`
