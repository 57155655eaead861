"""Headless Chromium driven over the DevTools protocol, for browser tests
that need more than a DOM dump: hover, clicks, downloads and screenshots.

Chromium is started with --remote-debugging-pipe: it reads protocol
messages (JSON, each ended by a NUL byte) on its file descriptor 3 and
writes answers and events on descriptor 4. One page (target) is opened and
attached in flat mode, so page commands carry its session id.
"""
import base64
import json
import os
import subprocess
import time


class CdpError(RuntimeError):
    pass


class Chromium:
    def __init__(self, browser, profile, width=1400, height=1000):
        to_child, from_parent = os.pipe()  # Chromium reads this (its fd 3)
        from_child, to_parent = os.pipe()  # and writes this (its fd 4)

        def child_fds():
            # dup first: a descriptor already numbered 3 or 4 would keep its
            # close-on-exec flag through dup2 onto itself.
            a, b = os.dup(to_child), os.dup(to_parent)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [browser, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
             "--disable-extensions", f"--user-data-dir={profile}", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            close_fds=False, preexec_fn=child_fds, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd=profile)
        os.close(to_child)
        os.close(to_parent)
        self._out = os.fdopen(from_parent, "wb", buffering=0)
        self._in = os.fdopen(from_child, "rb", buffering=0)
        self._buf = b""
        self._id = 0
        self.events = []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        self.page("Page.enable")

    def _read(self):
        while b"\0" not in self._buf:
            chunk = self._in.read(1 << 16)
            if not chunk:
                raise CdpError("Chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, session=None, **params):
        """One command (to the browser, or to `session`); its result."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self._out.write(json.dumps(msg).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise CdpError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def page(self, method, **params):
        return self.send(method, self.session, **params)

    def eval(self, expression):
        """The value of a JavaScript expression in the page (awaited)."""
        r = self.page("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise CdpError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, seconds=60):
        """Polls until `expression` is truthy; its value. A bound on waiting
        so a broken page fails the test instead of hanging it."""
        deadline = time.monotonic() + seconds
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"still false after {seconds} s: {expression}")
            time.sleep(0.05)

    def open(self, url):
        """Navigates to `url` (the old page is replaced first: about:blank
        between, so nothing of the last page is read as the new one's)."""
        self.page("Page.navigate", url="about:blank")
        self.wait_for("document.readyState === 'complete' && location.href === 'about:blank'")
        self.page("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} || "
                      f"location.href.startsWith({json.dumps(url.split('?')[0])})")

    def mouse(self, kind, x, y, button="none", clicks=0):
        self.page("Input.dispatchMouseEvent", type=kind, x=x, y=y, button=button,
                  clickCount=clicks)

    def centre(self, selector):
        """The viewport coordinates of the middle of the first match,
        scrolled into view first."""
        box = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                        "e.scrollIntoView({block: 'center', inline: 'center'}); "
                        "const r = e.getBoundingClientRect(); return [r.x + r.width / 2, "
                        "r.y + r.height / 2]; })()")
        return box[0], box[1]

    def hover(self, selector):
        x, y = self.centre(selector)
        self.mouse("mouseMoved", x, y)

    def click(self, selector):
        x, y = self.centre(selector)
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, "left", 1)
        self.mouse("mouseReleased", x, y, "left", 1)

    def allow_downloads(self, directory):
        self.send("Browser.setDownloadBehavior", behavior="allow", downloadPath=directory)

    def screenshot(self, path):
        data = self.page("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.send("Browser.close")
        except CdpError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.close()
        self._in.close()
