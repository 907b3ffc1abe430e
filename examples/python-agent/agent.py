#!/usr/bin/env python3
"""
pyecho: a Troupe agent in plain Python (standard library only, no NATS client library).

It speaks the NATS text protocol over a TCP socket and Troupe's wire contract in JSON:
  * serves A2A v0.3 messages on troupe.<tenant>.agent.<id>, queue group agent-<id> (replicas share load)
  * echoes the text upper-cased and picks the next recipient with the client-routing extension
  * streams artifact-update chunks to the subject the request names in its Troupe-Chunks header
    (troupe.<tenant>.chunks.<id>.…, where the broker lets only this agent publish) before the answer,
    which goes alone on the request's reply subject (the broker allows one reply per request); the node
    relays the chunks to the user (an agent never publishes into a thread itself)
  * announces its agent card on troupe.<tenant>.registry.<id> (the broker lets only this agent publish
    there), says goodbye on SIGTERM/SIGINT
  * answers a node's hello on troupe.<tenant>.hello: announces at once, and when the hello is a request
    (`troupe ps`) replies with its status
  * remembers answers by Troupe-Call-Id (the idempotency key, scoped to the thread), so a retried call
    gets the same answer

Run:  python3 agent.py --nats nats://127.0.0.1:4222 --creds .troupe/creds/tenants/demo/users/pyecho.creds
      (credentials from `troupe creds init` / `troupe creds add-agent pyecho`; nkeys.py signs with them)
"""
import argparse, json, os, re, signal, socket, sys, threading, time, uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nkeys  # noqa: E402  (standard library only, next to this file)

CLIENT_ROUTING_URI = "https://ranch.woi.dev/extensions/client-routing/v1"
MAX_PAYLOAD = 1024 * 1024  # the mesh's payload limit (1 MiB)
TTL_MS = 15_000  # the registry forgets an instance that has not announced itself for this long
TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")  # tenants and agent ids are single subject tokens


def log(msg, **fields):
    """One JSON object per line on stderr."""
    entry = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "msg": msg, **fields}
    print(json.dumps(entry), file=sys.stderr, flush=True)


def to_json(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ----------------------------------------------------------------------------------------------
# NATS client: just enough of https://docs.nats.io/reference/reference-protocols/nats-protocol
# ----------------------------------------------------------------------------------------------

class Msg:
    def __init__(self, subject, reply, headers, data):
        self.subject, self.reply, self.headers, self.data = subject, reply, headers, data

    def header(self, name):
        """NATS keeps header names as sent; look them up case-insensitively to be lenient."""
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


def parse_headers(block):
    """`NATS/1.0[ status]\\r\\nName: value\\r\\n...\\r\\n\\r\\n` -> dict (a repeated name keeps its first value)."""
    headers = {}
    for line in block.decode("utf-8", "replace").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip() and name.strip() not in headers:
            headers[name.strip()] = value.strip()
    return headers


class NatsConnection:
    """One connection: synchronous handshake, then a reader thread that dispatches MSG/HMSG by sid.
    Callbacks run on the reader thread, so they must hand slow work to another thread."""

    def __init__(self, url, user=None, password=None, name="python-agent", timeout=5.0, creds=None):
        hostport = url.split("://", 1)[-1].rsplit("@", 1)[-1]  # credentials come from user/password
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host or "127.0.0.1", int(port or 4222)), timeout=timeout)
        self.buf = bytearray()
        self.wlock = threading.Lock()
        self.subs, self.next_sid = {}, 0
        self.pongs = []  # one Event per PING we sent, oldest first
        self.closing = False
        self.on_lost = None  # called with a reason when the server drops us

        line = self._read_line()
        if not line.startswith("INFO "):
            raise ConnectionError(f"expected INFO from the server, got {line!r}")
        self.info = json.loads(line[5:])
        connect = {"verbose": False, "pedantic": False, "lang": "python", "version": "0.1.0",
                   "protocol": 1, "headers": True, "no_responders": True, "name": name}
        if creds is not None:  # JWT auth: sign the server's nonce with the user's nkey
            connect.update(nkeys.connect_fields(creds, self.info.get("nonce", "")))
        elif user is not None:
            connect.update(user=user, **{"pass": password or ""})
        # A PONG to this PING means the server accepted CONNECT; a bad password gets -ERR instead.
        self._send(f"CONNECT {json.dumps(connect)}\r\nPING\r\n".encode())
        while (line := self._read_line()) != "PONG":
            if line.startswith("-ERR"):
                raise ConnectionError(f"server refused the connection: {line[5:]}")
            if line == "PING":
                self._send(b"PONG\r\n")
        self.sock.settimeout(None)
        threading.Thread(target=self._read_loop, name="nats-reader", daemon=True).start()

    # -- reading --
    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk

    def _read_line(self):
        while (end := self.buf.find(b"\r\n")) < 0:
            self._fill()
        line = self.buf[:end].decode("utf-8")
        del self.buf[:end + 2]
        return line

    def _read_payload(self, size):
        while len(self.buf) < size + 2:  # the payload is followed by CRLF
            self._fill()
        data = bytes(self.buf[:size])
        del self.buf[:size + 2]
        return data

    def _read_loop(self):
        reason = "the server closed the connection"
        try:
            while True:
                line = self._read_line()
                op, args = line.split(" ", 1)[0].upper(), line.split()
                if op == "MSG":  # MSG <subject> <sid> [reply-to] <#bytes>
                    reply = args[3] if len(args) == 5 else None
                    self._dispatch(int(args[2]), Msg(args[1], reply, {}, self._read_payload(int(args[-1]))))
                elif op == "HMSG":  # HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes>
                    reply = args[3] if len(args) == 6 else None
                    size, total = int(args[-2]), int(args[-1])
                    raw = self._read_payload(total)
                    self._dispatch(int(args[2]), Msg(args[1], reply, parse_headers(raw[:size]), raw[size:]))
                elif op == "PING":
                    self._send(b"PONG\r\n")
                elif op == "PONG" and self.pongs:
                    self.pongs.pop(0).set()
                elif op == "-ERR":  # e.g. a permissions violation; fatal ones are followed by a close
                    log("nats error", error=line[5:].strip("' "))
                elif op == "INFO":  # cluster updates, lame-duck mode...
                    self.info.update(json.loads(line[5:]))
                # +OK: nothing to do (verbose is off)
        except (OSError, ValueError) as err:
            reason = str(err) or reason
        for waiter in self.pongs:
            waiter.set()
        if not self.closing and self.on_lost:
            self.on_lost(reason)

    def _dispatch(self, sid, msg):
        callback = self.subs.get(sid)
        if callback:
            callback(msg)

    # -- writing --
    def _send(self, data):
        with self.wlock:
            self.sock.sendall(data)

    def publish(self, subject, data, reply=None, headers=None):
        reply_to = f"{reply} " if reply else ""
        if headers:  # HPUB <subject> [reply-to] <#header bytes> <#total bytes>
            block = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            self._send(f"HPUB {subject} {reply_to}{len(block)} {len(block) + len(data)}\r\n".encode() + block + data + b"\r\n")
        else:  # PUB <subject> [reply-to] <#bytes>
            self._send(f"PUB {subject} {reply_to}{len(data)}\r\n".encode() + data + b"\r\n")

    def subscribe(self, subject, callback, queue=None):
        with self.wlock:
            self.next_sid += 1
            sid = self.next_sid
            self.subs[sid] = callback
            self.sock.sendall(f"SUB {subject} {queue + ' ' if queue else ''}{sid}\r\n".encode())
        return sid

    def unsubscribe(self, sid):
        self.subs.pop(sid, None)
        self._send(f"UNSUB {sid}\r\n".encode())

    def flush(self, timeout=2.0):
        """Round trip to the server: everything sent before has been processed when this returns True."""
        done = threading.Event()
        with self.wlock:
            self.pongs.append(done)
            self.sock.sendall(b"PING\r\n")
        return done.wait(timeout)

    def close(self):
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# ----------------------------------------------------------------------------------------------
# The agent
# ----------------------------------------------------------------------------------------------

class Reject(Exception):
    """A request we answer with a typed error: `{ kind: "error", error: { code, message } }`."""
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def error_reply(code, message):
    return to_json({"kind": "error", "error": {"code": code, "message": message}})


def parse_message(data):
    """Validates an A2A v0.3 message the way Troupe's MessageSchema does (the parts that matter here)."""
    if len(data) > MAX_PAYLOAD:
        raise Reject("PAYLOAD_TOO_LARGE", f"request is {len(data)} bytes; the limit is {MAX_PAYLOAD}; split the payload")
    try:
        m = json.loads(data.decode("utf-8"))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise Reject("INVALID_MESSAGE", f"request is not valid JSON ({err}); send an A2A v0.3 message as JSON")
    problems = []
    if not isinstance(m, dict):
        problems.append("(root): expected an object")
    else:
        if m.get("kind") != "message":
            problems.append('kind: expected "message"')
        if m.get("role") not in ("user", "agent"):
            problems.append('role: expected "user" or "agent"')
        if not isinstance(m.get("messageId"), str) or not m["messageId"]:
            problems.append("messageId: expected a non-empty string")
        parts = m.get("parts")
        if not isinstance(parts, list) or not parts:
            problems.append("parts: a message needs at least one part")
        else:
            for i, p in enumerate(parts):
                if not isinstance(p, dict) or p.get("kind") not in ("text", "file", "data"):
                    problems.append(f"parts.{i}: expected a text, file or data part")
                elif p["kind"] == "text" and not isinstance(p.get("text"), str):
                    problems.append(f"parts.{i}.text: expected a string")
    if problems:
        raise Reject("INVALID_MESSAGE", "request does not match the A2A message schema: " + "; ".join(problems[:5]))
    return m


class EchoAgent:
    def __init__(self, agent_id, tenant):
        self.nc, self.agent_id, self.tenant = None, agent_id, tenant
        self.instance_id = str(uuid.uuid4())
        self.node = f"{agent_id}-{self.instance_id[:8]}"
        self.registry = f"troupe.{tenant}.registry.{agent_id}"
        self.inflight, self.lock = 0, threading.Lock()
        self.answers = {}  # Troupe-Call-Id -> reply body, oldest first out
        self.handled = 0
        self.exit_code = None  # set by a signal (0) or a lost connection (1)

    def card(self):
        return {
            "id": self.agent_id, "name": "Python echo", "version": "0.1.0", "protocolVersion": "0.3.0",
            "description": "Echoes text back upper-cased; mention @<agent> to hand the thread to that agent.",
            "capabilities": {"streaming": True, "extensions": [{
                "uri": CLIENT_ROUTING_URI, "required": False,
                "description": "Names the next recipient: the sender, the user or another agent."}]},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "Echo", "description": "Repeats the message upper-cased.",
                        "tags": ["echo", "example", "python"], "examples": ["hello", "@writer please polish this"]}],
        }

    def run(self, nc):
        self.nc, nc.on_lost = nc, self.on_lost
        inbox = self.nc.subscribe(f"troupe.{self.tenant}.agent.{self.agent_id}", self.on_request,
                                  queue=f"agent-{self.agent_id}")
        self.nc.subscribe(f"troupe.{self.tenant}.hello", self.on_hello)
        self.nc.flush()  # subscriptions are in place before anyone learns about us
        self.announce()
        log("joined", agentId=self.agent_id, tenant=self.tenant, instanceId=self.instance_id, node=self.node)
        next_announce = time.monotonic() + TTL_MS / 3000
        # Polling a flag (rather than waiting on an Event) keeps the signal handler trivially safe.
        while self.exit_code is None:
            time.sleep(0.1)
            if time.monotonic() >= next_announce and self.exit_code is None:
                self.announce()
                next_announce += TTL_MS / 3000
        if self.exit_code == 0:  # leave politely: no new work, finish what we have, say goodbye
            try:
                self.nc.unsubscribe(inbox)
                deadline = time.monotonic() + 5
                while self.inflight and time.monotonic() < deadline:
                    time.sleep(0.02)
                self.nc.publish(self.registry, to_json({"kind": "goodbye", "instanceId": self.instance_id}))
                self.nc.flush()
                log("left", agentId=self.agent_id, tenant=self.tenant, instanceId=self.instance_id)
            except OSError as err:
                log("goodbye failed", agentId=self.agent_id, error=str(err))
        self.nc.close()
        return self.exit_code

    def announce(self):
        try:
            status = {"state": "busy" if self.inflight else "idle", "inFlight": self.inflight, "handled": self.handled}
            self.nc.publish(self.registry, to_json({"kind": "announce", "instanceId": self.instance_id,
                                                    "ttlMs": TTL_MS, "card": self.card(), "status": status}))
        except OSError as err:
            self.on_lost(str(err))

    def stop(self, *_):
        self.exit_code = 0

    def on_lost(self, reason):
        log("disconnected", agentId=self.agent_id, error=reason)
        self.exit_code = 1

    def on_hello(self, msg):
        self.announce()
        if msg.reply:
            state = "busy" if self.inflight else "idle"
            # detail.instance: the instanceId this process announces, which is what makes the reply count.
            actor = {"kind": "agent", "id": self.agent_id, "state": state, "node": self.node, "status": "live",
                     "detail": {"instance": self.instance_id}}
            self.nc.publish(msg.reply, to_json({"node": self.node, "actors": [actor], "passivated": 0}))

    def on_request(self, msg):
        # On the reader thread: count it (for `ps`) and hand it to a worker so PINGs keep being answered.
        with self.lock:
            self.inflight += 1
        threading.Thread(target=self.handle, args=(msg,), daemon=True).start()

    def handle(self, msg):
        started, thread = time.monotonic(), msg.header("Troupe-Thread")
        outcome = {}
        call_id = msg.header("Troupe-Call-Id")
        with self.lock:
            cached = self.answers.get(call_id) if call_id else None
        if cached is not None:  # a retried call: the same answer, without doing the work again
            try:
                if msg.reply:
                    self.nc.publish(msg.reply, cached, headers=self.reply_headers(msg))
            finally:
                with self.lock:
                    self.inflight -= 1
            log("answered again", thread=thread, agentId=self.agent_id, callId=call_id)
            return
        try:
            message = parse_message(msg.data)
            reply = self.answer(msg, message)
            body = to_json(reply)
            if len(body) > self.nc.info.get("max_payload", MAX_PAYLOAD):  # the server would drop us
                raise Reject("PAYLOAD_TOO_LARGE", f"the reply would be {len(body)} bytes; send less text")
            outcome = {"messageId": message["messageId"], "recipient": reply["metadata"][CLIENT_ROUTING_URI]["recipient"]}
        except Reject as err:
            body, outcome = error_reply(err.code, str(err)), {"error": err.code}
        except Exception as err:  # a bug in the agent: say so rather than leave the caller waiting
            body, outcome = error_reply("AGENT_ERROR", f"{self.agent_id} failed: {err!r}"), {"error": "AGENT_ERROR"}
        if call_id and len(call_id) <= 512:
            with self.lock:
                self.answers[call_id] = body
                if len(self.answers) > 1000:
                    self.answers.pop(next(iter(self.answers)))
        try:
            if msg.reply:
                self.nc.publish(msg.reply, body, headers=self.reply_headers(msg))
            else:
                outcome["dropped"] = "no reply subject"
        except OSError as err:
            outcome["publishError"] = str(err)
        finally:
            with self.lock:
                self.inflight -= 1
                self.handled += 1
        log("handled", thread=thread, agentId=self.agent_id, tenant=self.tenant, hop=msg.header("Troupe-Hop"),
            sender=msg.header("Troupe-Sender"), ms=round((time.monotonic() - started) * 1000, 1), **outcome)

    def answer(self, msg, message):
        text = " ".join(p["text"] for p in message["parts"] if p["kind"] == "text") or "(no text)"
        out = f"{self.agent_id}: {text.upper()}"
        recipient, reason = self.route(text, message)
        task_id = msg.header("Troupe-Task") or message.get("taskId")
        context_id = msg.header("Troupe-Context") or message.get("contextId")
        chunks = self.chunk_subject(msg)
        if chunks:
            thread = msg.header("Troupe-Thread")
            self.stream(chunks, msg, out, task_id or thread or message["messageId"],
                        context_id or thread or task_id or message["messageId"])
        reply = {"kind": "message", "role": "agent", "messageId": str(uuid.uuid4()),
                 "parts": [{"kind": "text", "text": out}],
                 "metadata": {CLIENT_ROUTING_URI: {"recipient": recipient, "reason": reason}}}
        if context_id:
            reply["contextId"] = context_id
        if task_id:
            reply["taskId"] = task_id
        return reply

    def route(self, text, message):
        """Client routing: "@<id>" hands the thread to that agent if the router listed it, else back to the sender."""
        metadata = message.get("metadata") if isinstance(message.get("metadata"), dict) else {}
        routing = metadata.get(CLIENT_ROUTING_URI) if isinstance(metadata.get(CLIENT_ROUTING_URI), dict) else {}
        cards = routing.get("agentCards") if isinstance(routing.get("agentCards"), list) else []
        known = {card.get("id") for card in cards if isinstance(card, dict)}
        for mention in re.findall(r"@([A-Za-z0-9_-]+)", text):
            if mention != self.agent_id and mention in known:
                return mention, f"the message mentions @{mention}"
        return "sender", "echoed back to the sender"

    def chunk_subject(self, msg):
        """The subject the caller wants chunks on (header Troupe-Chunks), if it is one of this agent's
        own: troupe.<tenant>.chunks.<id>.<caller>.<call>. Anything else streams nothing."""
        subject = msg.header("Troupe-Chunks")
        parts = subject.split(".") if subject else []
        if len(parts) == 6 and parts[:4] == ["troupe", self.tenant, "chunks", self.agent_id] \
                and all(TOKEN.match(p) for p in parts[4:]):
            return subject
        return None

    def stream(self, subject, msg, text, task_id, context_id):
        """Sends the reply text as artifact-update chunks (at least two) to the request's chunk subject,
        before the final reply."""
        pieces = re.findall(r"\S+\s*", text)
        if len(pieces) < 2:
            pieces = [text[: len(text) // 2], text[len(text) // 2:]]
        artifact_id = str(uuid.uuid4())
        for piece in pieces:
            self.nc.publish(subject, to_json({
                "kind": "artifact-update", "taskId": task_id, "contextId": context_id,
                "artifact": {"artifactId": artifact_id, "parts": [{"kind": "text", "text": piece}]},
                "append": True, "lastChunk": False}), headers=self.reply_headers(msg))
            time.sleep(0.01)  # a real agent would be waiting for its model here

    def reply_headers(self, msg):
        headers = {"Troupe-Sender": self.agent_id}
        for name in ("Troupe-Thread", "traceparent"):
            if msg.header(name):
                headers[name] = msg.header(name)
        return headers


def main():
    ap = argparse.ArgumentParser(description="pyecho: a Troupe agent in plain Python")
    ap.add_argument("--nats", default=os.environ.get("TROUPE_NATS_URL", "nats://127.0.0.1:4222"))
    ap.add_argument("--tenant", default=os.environ.get("TROUPE_TENANT", "demo"))
    ap.add_argument("--id", default="pyecho", help="agent id (its inbox subject token)")
    ap.add_argument("--creds", default=os.environ.get("TROUPE_NATS_CREDS"),
                    help="the agent's .creds file (troupe creds add-agent <id>)")
    ap.add_argument("--user", default=None, help="NATS user, for a server configured with passwords")
    ap.add_argument("--password", default=os.environ.get("TROUPE_NATS_PASSWORD"))
    args = ap.parse_args()
    for what, value in (("tenant", args.tenant), ("agent id", args.id)):
        if not TOKEN.match(value):
            ap.error(f'invalid {what} "{value}": use A-Z, a-z, 0-9, _ and -')
    if args.creds is None and args.user is None:
        ap.error("no credentials: pass --creds <file> (or set TROUPE_NATS_CREDS), or --user/--password")
    agent = EchoAgent(args.id, args.tenant)
    signal.signal(signal.SIGTERM, agent.stop)  # before connecting, so no early signal is lost
    signal.signal(signal.SIGINT, agent.stop)
    try:
        nc = NatsConnection(args.nats, args.user, args.password, name=f"troupe-agent-{args.id}", creds=args.creds)
    except (OSError, ValueError) as err:
        log("connect failed", server=args.nats, user=args.user, creds=args.creds, error=str(err))
        return 1
    return agent.run(nc)


if __name__ == "__main__":
    sys.exit(main())
