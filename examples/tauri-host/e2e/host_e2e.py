"""End-to-end test of the Tauri host in a real webview (WebKitGTK), driven over WebDriver.

tauri-driver starts the host binary under WebKitWebDriver; Selenium clicks the page as a user
would. The test opens (inits) a document from the page, creates and writes a block, sees the
committed events reach the page's timeline (forwarded by the host with `tauri::Emitter`),
creates an LLM agent whose provider is a local Anthropic-compatible server started here, asks it
for a proposal, approves it from the page, rejects a second one, closes the document, and checks
the `.elf` with the CLI (`verify`, the blocks' contents, the decisions). Screenshots go to
OUT_DIR.

Run it through `scripts/test` (which installs xvfb, webkit2gtk-driver, tauri-driver and
selenium, builds the host, and runs this under xvfb-run), or by hand:

    xvfb-run -a .venv/bin/python examples/tauri-host/e2e/host_e2e.py \
        --host target/debug/elfiee-tauri-host --elfiee target/debug/elfiee --out target/tauri-e2e
"""

import argparse
import faulthandler
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.options import ArgOptions
from selenium.webdriver.support.ui import WebDriverWait

KEY_ENV = "ELFIEE_E2E_KEY"
NOTE = "# Plan\n\nShip the host test.\n"
AGENT_TEXT = "A summary of the plan, as asked.\n"


def command(cap, block, payload, why):
    block = f"<block_id>{block}</block_id>" if block else ""
    return (f"<command><cap_id>{cap}</cap_id>{block}<payload>{json.dumps(payload)}</payload>"
            f"<description>{why}</description></command>\n")


def answer(plan_id):
    """The model's answer: a summary block, its text, and a `reference` link to the plan."""
    return ("I will write the summary into a new block.\n"
            + command("core.create", None,
                      {"name": "summary", "block_type": "markdown", "block_id": "summary"},
                      "create the summary")
            + command("markdown.write", "summary", {"markdown": AGENT_TEXT}, "write it")
            + command("core.link", "summary", {"to": plan_id, "relation": "reference"},
                      "it summarises the plan"))


def anthropic_stream(text):
    """The Messages API's streamed answer (server-sent events) carrying `text`."""
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "m", "type": "message", "role": "assistant", "model": "m", "content": [],
            "usage": {"input_tokens": 1, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                           "usage": {"output_tokens": 3}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events).encode()


class Provider(http.server.BaseHTTPRequestHandler):
    """A local stand-in for the Anthropic API: every POST gets `answer`, streamed."""
    requests = []
    answer = ""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        Provider.requests.append((self.path, body.decode("utf-8", "replace")))
        out = anthropic_stream(Provider.answer)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"tauri-driver exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"tauri-driver did not listen on {port} within {timeout}s")


def cli(elfiee, elf, *args):
    out = subprocess.run([elfiee, "--elf", elf, "--json", *args], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"elfiee {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return json.loads(out.stdout)


class Page:
    def __init__(self, driver, out_dir):
        self.d = driver
        self.out_dir = out_dir

    def find(self, css):
        return self.d.find_element(By.CSS_SELECTOR, css)

    def all(self, css):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def wait(self, what, cond, timeout=30):
        print(f"waiting for {what}", flush=True)

        def check(_):
            err = self.all("#error")
            if err and err[0].is_displayed():
                raise AssertionError(f"the page shows an error while waiting for {what}: "
                                     f"{err[0].text}")
            return cond()
        try:
            # The page re-renders its lists on every event: an element found a moment ago may be
            # gone by the time it is read, so a stale element means "look again".
            return WebDriverWait(self.d, timeout, poll_frequency=0.1,
                                 ignored_exceptions=[StaleElementReferenceException]).until(check)
        except Exception:
            self.shot("failure.png")
            raise AssertionError(f"timed out waiting for {what}")

    def type(self, css, text):
        box = self.find(css)
        box.clear()
        box.send_keys(text)

    def set_value(self, css, text):
        # send_keys turns "\n" into Enter presses; a textarea's value is set directly.
        self.d.execute_script("arguments[0].value = arguments[1];", self.find(css), text)

    def click(self, css):
        # The element may be re-rendered between finding and clicking it (a list refreshes on
        # every event): find it again until one click lands.
        self.wait(f"a click on {css}", lambda: self.find(css).click() or True, timeout=10)

    def timeline(self):
        return [(li.get_attribute("data-cap"), li.get_attribute("data-entity"))
                for li in self.all("#timeline li")]

    def shot(self, name):
        # Bounded: after a failure WebKitWebDriver has been seen to never answer a screenshot.
        path = os.path.join(self.out_dir, name)
        t = threading.Thread(target=self.d.save_screenshot, args=(path,), daemon=True)
        t.start()
        t.join(20)
        print(f"screenshot: {path}" if not t.is_alive() else f"screenshot {name}: no answer in 20 s")


def run(args):
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="elfiee-tauri-e2e-")
    elf = os.path.join(work, "plan.elf")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    provider_url = f"http://127.0.0.1:{server.server_address[1]}"

    env = dict(os.environ)
    env[KEY_ENV] = "sk-local"
    # WebKitGTK's sandbox cannot start as root in a container, and Xvfb has no GPU.
    env.setdefault("WEBKIT_DISABLE_SANDBOX_THIS_IS_DANGEROUS", "1")
    env.setdefault("WEBKIT_DISABLE_DMABUF_RENDERER", "1")
    env.setdefault("WEBKIT_DISABLE_COMPOSITING_MODE", "1")
    env.setdefault("LIBGL_ALWAYS_SOFTWARE", "1")
    port, native = free_port(), free_port()
    driver_log = open(os.path.join(args.out, "tauri-driver.log"), "w")
    tauri_driver = subprocess.Popen(
        [args.tauri_driver, "--port", str(port), "--native-port", str(native)],
        env=env, cwd=work, stdout=driver_log, stderr=subprocess.STDOUT)
    driver = None
    try:
        wait_port(port, tauri_driver)
        opts = ArgOptions()
        opts.set_capability("browserName", "wry")
        opts.set_capability("tauri:options", {"application": os.path.abspath(args.host)})
        driver = webdriver.Remote(command_executor=f"http://127.0.0.1:{port}", options=opts)
        page = Page(driver, args.out)
        page.wait("the page to load", lambda: page.all("#open"))

        # Open (init) a document from the page.
        page.type("#path", elf)
        page.type("#owner", "alice")
        page.click("#open")
        page.wait("the document to open",
                  lambda: page.find("#status").get_attribute("data-state") == "open")
        open_seq = int(page.find("#status").get_attribute("data-open-seq"))

        # Create and write a block through the page.
        page.type("#new-name", "plan")
        page.click("#create")
        block_id = page.wait("the new block in the list, selected", lambda: next(
            (li.get_attribute("data-id") for li in page.all("#blocks li.selected")
             if li.text.endswith("plan")), None))
        Provider.answer = answer(block_id)
        page.wait("the core.create event in the timeline",
                  lambda: ("core.create", block_id) in page.timeline())
        page.set_value("#content", NOTE)
        page.click("#save")
        page.wait("the markdown.write event in the timeline",
                  lambda: ("markdown.write", block_id) in page.timeline())

        # An LLM agent whose provider is the local server; ask it, with the block as context.
        page.type("#agent-name", "helper")
        page.type("#agent-base-url", provider_url)
        page.type("#agent-key-env", KEY_ENV)
        page.click("#agent-create")
        page.wait("the agent.configure event in the timeline",
                  lambda: any(cap == "agent.configure" for cap, _ in page.timeline()))
        page.wait("the agent in the picker", lambda: not page.find("#ask").get_attribute("disabled"))
        page.set_value("#prompt", "Summarise the plan.")
        page.click("#ask")
        page.wait("a pending proposal",
                  lambda: page.all(".proposal .status.pending") and page.all(".proposal .approve"),
                  timeout=60)
        assert Provider.requests, "the provider was never called"
        assert "Ship the host test." in Provider.requests[-1][1], \
            "the selected block was not in the model's context"
        commands = page.wait("the proposal's commands",
                             lambda: [li.text for li in page.all(".proposal ol li")])
        assert len(commands) == 3 and commands[0].startswith("core.create"), commands
        page.shot("proposal.png")

        # Approve it from the page: its commands run in the engine, their events reach the page.
        page.click(".proposal .approve")
        page.wait("the approved proposal", lambda: page.all(".proposal .status.approved"))
        page.wait("the approved commands' events in the timeline",
                  lambda: ("markdown.write", "summary") in page.timeline())
        page.wait("the agent's block in the list",
                  lambda: [li for li in page.all("#blocks li") if li.get_attribute("data-id") == "summary"])
        page.wait("the relation graph with the blocks",
                  lambda: len(page.all("#graph-picture svg")) == 1
                  and "summary" in page.find("#graph-picture").text
                  and "reference" in page.find("#graph-picture").text)

        # Ask again and reject the second proposal from the page: nothing of it runs.
        page.set_value("#prompt", "Summarise it once more.")
        page.click("#ask")
        page.wait("a second pending proposal", lambda: page.all(".proposal .reject"), timeout=60)
        page.click(".proposal .reject")
        page.wait("the rejected proposal", lambda: page.all(".proposal .status.rejected")
                  and not page.all(".proposal .status.pending"))
        page.shot("screenshot.png")
        driver.execute_script("document.getElementById('graph').scrollIntoView()")
        page.shot("graph.png")
        newest_first = [int(li.get_attribute("data-seq")) for li in page.all("#timeline li")]
        seen = newest_first[::-1]
        print(f"timeline: {len(seen)} events reached the page")

        # Close the document from the page, then the window.
        page.click("#close")
        page.wait("the document to close",
                  lambda: page.find("#status").get_attribute("data-state") == "closed")
    finally:
        if driver is not None:
            try:
                driver.quit()
            except WebDriverException as e:
                print(f"note: quitting the session: {e}", file=sys.stderr)
        tauri_driver.terminate()
        try:
            tauri_driver.wait(10)
        except subprocess.TimeoutExpired:
            tauri_driver.kill()
        server.shutdown()
        driver_log.close()

    # What the page did is in the .elf: check it with the CLI, in a fresh process.
    verify = cli(args.elfiee, elf, "verify")
    assert verify["ok"] is True, verify
    # Every event committed while the page had the document open reached it, once, in order.
    assert seen == list(range(open_seq + 1, verify["events"] + 1)), (open_seq, seen, verify)
    read = cli(args.elfiee, elf, "markdown", "read", block_id)
    assert read["markdown"] == NOTE, read
    read = cli(args.elfiee, elf, "markdown", "read", "summary")
    assert read["markdown"] == AGENT_TEXT, read
    log = cli(args.elfiee, elf, "log")
    caps = [e["attribute"].split("/", 1)[1] for e in log]
    agents = cli(args.elfiee, elf, "agent", "list")
    assert len(agents) == 1, agents
    decided = cli(args.elfiee, elf, "agent", "proposals", agents[0]["agent_block_id"])
    assert [p["status"] for p in decided] == ["approved", "rejected"], decided
    blocks = cli(args.elfiee, elf, "block", "list")
    assert sorted(b["name"] for b in blocks if b["block_type"] == "markdown") == ["plan", "summary"], \
        blocks
    shown = cli(args.elfiee, elf, "block", "show", "summary")
    assert shown["children"].get("reference") == [block_id], shown
    for cap in ["core.create", "markdown.write", "agent.configure", "agent.approve", "core.link"]:
        assert cap in caps, f"{cap} missing from the log: {caps}"
    shutil.rmtree(work, ignore_errors=True)
    print(f"ok: {verify['events']} events verified; the page saw all {len(seen)} committed "
          f"after it opened the document")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", required=True, help="the built elfiee-tauri-host binary")
    p.add_argument("--elfiee", required=True, help="the built elfiee CLI binary")
    p.add_argument("--out", required=True, help="where screenshots and logs go")
    p.add_argument("--tauri-driver", default=shutil.which("tauri-driver") or "tauri-driver")
    # A hang anywhere (the webview, the driver, the host) ends the test with every thread's stack.
    faulthandler.dump_traceback_later(300, exit=True)
    run(p.parse_args())


if __name__ == "__main__":
    main()
