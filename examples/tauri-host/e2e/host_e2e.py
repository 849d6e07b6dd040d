"""End-to-end test of the Tauri host in a real webview (WebKitGTK), driven over WebDriver.

tauri-driver starts the host binary under WebKitWebDriver; Selenium clicks the page as a user
would. The test opens (inits) a document from the page, creates and writes a block, sees the
committed events reach the page's timeline (forwarded by the host with `tauri::Emitter`),
creates an LLM agent whose provider is a local Anthropic-compatible server started here, asks it
for a proposal, approves it from the page, rejects a second one, closes the document, and checks
the `.elf` with the CLI (`verify`, the blocks' contents, the decisions).

Then agent steps (checkpoints, issue 26): a second document is prepared with the CLI (a project
folder imported as a directory, an agent that references it) and an agent adds
`src/from_agent.rs` through `elfiee mcp-server` (raw JSON-RPC over stdio, as Claude Code would):
that call is step 1 of the server's `mcp-<uuid>` session and the file lands in the folder. The
page opens the document, picks the session, sees the step and the file it created, undoes it
(the file leaves the folder; `agent steps` says `undone`), redoes it (the file is back, byte for
byte), and shows the engine's refusal when the file was changed on disk since. Screenshots go to
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
import queue
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
from selenium.webdriver.support.ui import Select, WebDriverWait

KEY_ENV = "ELFIEE_E2E_KEY"
NOTE = "# Plan\n\nShip the host test.\n"
AGENT_TEXT = "A summary of the plan, as asked.\n"
FROM_AGENT = "pub fn from_agent() -> &'static str {\n    \"made over MCP\"\n}\n"


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


class McpServer:
    """`elfiee mcp-server` driven over stdio: newline-delimited JSON-RPC, as an MCP client does."""

    def __init__(self, elfiee, elf, editor, log):
        env = dict(os.environ, NO_COLOR="1")
        env.pop("RUST_LOG", None)
        self.p = subprocess.Popen([elfiee, "--elf", elf, "mcp-server", "--editor", editor],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                  text=True, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.last_id = 0

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, msg):
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
        self.p.stdin.flush()

    def request(self, method, params, timeout=60):
        self.last_id += 1
        self.send({"id": self.last_id, "method": method, "params": params})
        end = time.time() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, end - time.time()))
            except queue.Empty:
                raise AssertionError(f"mcp-server did not answer {method} within {timeout}s")
            if line is None:
                raise AssertionError(f"mcp-server exited ({self.p.wait()}) before answering {method}")
            msg = json.loads(line)
            if msg.get("id") == self.last_id:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg["result"]

    def close(self):
        # End of input is the client going away: the server stops.
        self.p.stdin.close()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise AssertionError("mcp-server did not stop within 30 s of its input closing")


def prepare_agent_project(elfiee, work, log):
    """A project folder imported into a new document, an agent referencing it, and one step of
    that agent over MCP (it adds `src/from_agent.rs`). No model is needed: the MCP client is
    the agent. Returns the document, the folder, and the MCP session's id."""
    root = os.path.join(work, "proj")
    os.makedirs(os.path.join(root, "src"))
    with open(os.path.join(root, "src", "main.rs"), "w") as f:
        f.write("fn main() {}\n")
    elf = os.path.join(work, "project.elf")
    cli(elfiee, elf, "init", elf, "--owner", "Alice")
    directory = cli(elfiee, elf, "dir", "import", root)["block_id"]
    made = cli(elfiee, elf, "agent", "create", "--name", "maker")
    agent, editor = made["agent_block_id"], made["editor_id"]
    cli(elfiee, elf, "block", "link", agent, directory, "--relation", "reference")
    server = McpServer(elfiee, elf, editor, log)
    try:
        server.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                      "clientInfo": {"name": "host-e2e", "version": "1"}})
        server.send({"method": "notifications/initialized"})
        added = server.request("tools/call", {"name": "elfiee_directory_add", "arguments": {
            "directory": directory, "path": "src/from_agent.rs", "content": FROM_AGENT}})
        assert not added.get("isError"), added
    finally:
        server.close()
    assert read_text(os.path.join(root, "src", "from_agent.rs")) == FROM_AGENT, \
        "the MCP server did not export the agent's file to the project folder"
    sessions = cli(elfiee, elf, "agent", "sessions", agent)
    assert len(sessions) == 1 and sessions[0]["session_id"].startswith("mcp-"), sessions
    session = sessions[0]["session_id"]
    steps = cli(elfiee, elf, "agent", "steps", session)["steps"]
    assert [(s["step"], s["status"], s["files_created"]) for s in steps] == \
        [(1, "done", ["src/from_agent.rs"])], steps
    return elf, root, session


def read_text(path):
    with open(path) as f:
        return f.read()


def step_status(elfiee, elf, session):
    return [(s["step"], s["status"]) for s in cli(elfiee, elf, "agent", "steps", session)["steps"]]


class Page:
    def __init__(self, driver, out_dir):
        self.d = driver
        self.out_dir = out_dir

    def find(self, css):
        return self.d.find_element(By.CSS_SELECTOR, css)

    def all(self, css):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def wait(self, what, cond, timeout=30, error_expected=False):
        print(f"waiting for {what}", flush=True)

        def check(_):
            err = self.all("#error")
            if not error_expected and err and err[0].is_displayed():
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

    def error(self):
        err = self.find("#error")
        return err.text if err.is_displayed() else None

    def select(self, css, value):
        # The picker is rebuilt on every event: pick again until the option is there and taken.
        def pick():
            Select(self.find(css)).select_by_value(value)
            return self.find(css).get_attribute("value") == value
        self.wait(f"{value} picked in {css}", pick, timeout=20)

    def step(self, n):
        """(status, files created) of step `n` in the steps panel, or None."""
        for li in self.all(f'#steps li[data-step="{n}"]'):
            return li.get_attribute("data-status"), li.get_attribute("data-created").split("\n")
        return None

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
    with open(os.path.join(args.out, "mcp-server.log"), "w") as mcp_log:
        project_elf, project, session = prepare_agent_project(args.elfiee, work, mcp_log)
    made = os.path.join(project, "src", "from_agent.rs")

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
        # The parents query (seed 002 Ph2.1): the plan is linked from the agent's summary.
        page.click(f'#blocks li[data-id="{block_id}"]')
        page.wait("the plan's parents under its name",
                  lambda: "summary (reference)" in page.find("#parents").text)

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

        # Close the document from the page.
        page.click("#close")
        page.wait("the document to close",
                  lambda: page.find("#status").get_attribute("data-state") == "closed")

        # Agent steps: open the project's document (it exists: no owner name), pick the agent's
        # MCP session, see its step and the file it created.
        page.type("#path", project_elf)
        page.find("#owner").clear()
        page.click("#open")
        page.wait("the project document to open",
                  lambda: page.find("#status").get_attribute("data-state") == "open"
                  and project_elf in page.find("#status").text)
        page.select("#sessions", session)
        page.wait("step 1, done, with the file it created",
                  lambda: page.step(1) == ("done", ["src/from_agent.rs"])
                  and "src/from_agent.rs" in page.find("#steps").text)
        assert not page.find("#undo-step").get_attribute("disabled")
        driver.execute_script("document.getElementById('steps-panel').scrollIntoView()")
        page.shot("agent-steps.png")

        # Undo it from the page: the file leaves the project folder, the step is undone.
        page.click("#undo-step")
        page.wait("step 1 undone", lambda: page.step(1) == ("undone", ["src/from_agent.rs"]))
        note = page.find("#steps-note").text
        assert note.startswith("undid step 1") and "removed src/from_agent.rs" in note, note
        assert not os.path.exists(made), "the undone step's file is still in the project folder"
        assert step_status(args.elfiee, project_elf, session) == [(1, "undone")]
        page.wait("Redo enabled", lambda: not page.find("#redo-step").get_attribute("disabled"))
        page.shot("agent-step-undone.png")

        # Redo it: the file is back, byte for byte.
        page.click("#redo-step")
        page.wait("step 1 done again", lambda: page.step(1) == ("done", ["src/from_agent.rs"]))
        note = page.find("#steps-note").text
        assert note.startswith("redid step 1") and "src/from_agent.rs" in note, note
        assert os.path.exists(made) and read_text(made) == FROM_AGENT, \
            "the redone step's file is not back in the project folder"
        assert step_status(args.elfiee, project_elf, session) == [(1, "done")]

        # The file changed on disk since: the undo is refused, the page says so and why, and
        # nothing is touched.
        changed = FROM_AGENT + "// changed by hand\n"
        with open(made, "w") as f:
            f.write(changed)
        page.click("#undo-step")
        refused = page.wait("the refusal on the page",
                            lambda: (page.error() or "") if "src/from_agent.rs" in (page.error() or "")
                            else None, error_expected=True)
        assert "changed since" in refused, refused
        print(f"refused as expected: {refused}")
        note = page.find("#steps-note")
        assert "src/from_agent.rs" in note.text and "bad" in note.get_attribute("class"), \
            "the steps panel does not say why the undo was refused"
        driver.execute_script("document.getElementById('steps-panel').scrollIntoView()")
        page.shot("agent-undo-refused.png")
        assert read_text(made) == changed, "a refused undo touched the file"
        assert page.step(1)[0] == "done"
        assert step_status(args.elfiee, project_elf, session) == [(1, "done")]

        # Close it (the next call clears the error), then the window.
        page.find("#close").click()
        page.wait("the project document to close",
                  lambda: page.find("#status").get_attribute("data-state") == "closed",
                  error_expected=True)
        assert page.error() is None, page.error()
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

    # The project's document after the page's undo and redo: sound, the undo and the redo in
    # its log (as the owner's `core.restore`), the step done, the (hand-changed) file there.
    verify = cli(args.elfiee, project_elf, "verify")
    assert verify["ok"] is True, verify
    restores = [e for e in cli(args.elfiee, project_elf, "log")
                if e["attribute"].endswith("/core.restore")]
    commands = {}
    for e in restores:
        commands.setdefault(e["cmd_id"], []).append(e["value"])
    kinds = [sorted({k for v in values for k in v["reason"]}) for values in commands.values()]
    assert kinds == [["undo"], ["redo"]], kinds
    # The undo removed the agent's block for the file (one restore to nothing); the redo
    # brought it back with its text.
    undo, redo = commands.values()
    assert sum(v["block"] is None for v in undo) == 1, undo
    assert [v["block"]["contents"]["text"] for v in redo
            if v["block"] and v["block"]["name"] == "src/from_agent.rs"] == [FROM_AGENT], redo
    assert step_status(args.elfiee, project_elf, session) == [(1, "done")]
    assert read_text(made) == changed
    shutil.rmtree(work, ignore_errors=True)
    print(f"ok: the page saw all {len(seen)} events committed after it opened the document; "
          f"an agent's step undone and redone from the page, a changed file's undo refused")


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
