#!/usr/bin/env python3
"""A context engine in Python, served over the ctxbridge engine process protocol (docs/engine-protocol.md#the-engine-process-protocol).

Standard library only. JSON-RPC 2.0, one object per line, on stdin/stdout; stderr is the log.

What it does:
  * keeps each session's messages (in memory, and in `<stateDir>/<session>.json` when the
    config names a `stateDir`), deduplicated by message id;
  * `assemble` returns a summary of what it compacted away plus the kept messages, with
    `contextProjection: {mode: "thread_bootstrap", epoch: "epoch-<n>"}` — the epoch changes
    only when it compacts, so the host reuses the backend thread in between;
  * owns its compaction (`ownsCompaction: true`): `compact` folds all but the newest
    `keepRecent` messages into the summary and bumps the epoch;
  * declares durable turns (`transcriptSemantics`) and implements `commitTurn` idempotently:
    `committed` for a new `advancementKey`, `duplicate` for a known one (durable engines get
    `commitTurn` instead of `afterTurn`, so there is no `afterTurn`);
  * `acceptedHostParams: ["sessionKey", "prompt"]`: the host sends only these host keys
    (no runtimeSettings, no runtimeContext).

Config (`plugins.entries.<id>.config`): `stateDir` (string, optional), `keepRecent` (int,
default 6), `summaryChars` (int, default 160: characters kept per folded message).
"""

import hashlib
import json
import os
import sys
import tempfile

DEFAULT_KEEP_RECENT = 6


def log(*parts):
    print("python-engine:", *parts, file=sys.stderr, flush=True)


class RpcError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def message_text(message):
    """The plain text of an AgentMessage (text parts, or the summary of summary roles)."""
    if message.get("role") in ("compactionSummary", "branchSummary") and message.get("summary"):
        return message["summary"]
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def estimate_tokens(messages, summary):
    chars = len(summary) + sum(len(message_text(m)) for m in messages)
    return (chars + 3) // 4


class Session:
    def __init__(self, session_id):
        self.session_id = session_id
        self.messages = []
        self.summary = ""
        self.epoch = 1
        self.committed_keys = []

    def to_json(self):
        return {
            "sessionId": self.session_id,
            "messages": self.messages,
            "summary": self.summary,
            "epoch": self.epoch,
            "committedKeys": self.committed_keys,
        }

    @classmethod
    def from_json(cls, data):
        session = cls(data["sessionId"])
        session.messages = data.get("messages", [])
        session.summary = data.get("summary", "")
        session.epoch = int(data.get("epoch", 1))
        session.committed_keys = data.get("committedKeys", [])
        return session

    def known_ids(self):
        return {m.get("id") for m in self.messages if m.get("id")}

    def add(self, message):
        """Stores a message; False when its id is already stored."""
        message_id = message.get("id")
        if message_id and message_id in self.known_ids():
            return False
        self.messages.append(message)
        return True


class Engine:
    def __init__(self):
        self.engine_id = "python-engine"
        self.state_dir = None
        self.keep_recent = DEFAULT_KEEP_RECENT
        self.summary_chars = 160
        self.sessions = {}

    # -- storage -----------------------------------------------------------------------------

    def session_path(self, session_id):
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]
        return os.path.join(self.state_dir, digest + ".json")

    def session(self, session_id):
        session = self.sessions.get(session_id)
        if session is None:
            session = Session(session_id)
            if self.state_dir:
                path = self.session_path(session_id)
                if os.path.exists(path):
                    with open(path, "r", encoding="utf-8") as handle:
                        session = Session.from_json(json.load(handle))
            self.sessions[session_id] = session
        return session

    def persist(self, session):
        """Writes the session atomically (temp file + rename): a commit is all or nothing."""
        if not self.state_dir:
            return
        os.makedirs(self.state_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.state_dir, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(session.to_json(), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.session_path(session.session_id))

    # -- protocol methods --------------------------------------------------------------------

    def initialize(self, params):
        config = params.get("config") or {}
        self.engine_id = params.get("engineId") or self.engine_id
        self.state_dir = config.get("stateDir")
        self.keep_recent = int(config.get("keepRecent", DEFAULT_KEEP_RECENT))
        self.summary_chars = int(config.get("summaryChars", 160))
        host = params.get("host") or {}
        log("serving", self.engine_id, "for host", host.get("label"), "state:", self.state_dir)
        return {
            "protocolVersion": 1,
            "info": {
                "id": self.engine_id,
                "name": "Python example engine",
                "version": "1.0.0",
                "ownsCompaction": True,
                "acceptedHostParams": ["sessionKey", "prompt"],
                "transcriptSemantics": {
                    "currentTurnFence": "before-current-turn-entry-v1",
                    "turnAdvancementIdempotency": "atomic-idempotent-v1",
                },
            },
            "methods": ["ingestBatch", "bootstrap", "maintain", "commitTurn", "dispose"],
        }

    def bootstrap(self, params):
        session = self.session(params["sessionId"])
        if session.messages or session.summary:
            return {"bootstrapped": True, "importedMessages": len(session.messages)}
        return {"bootstrapped": False, "reason": "no stored state for this session"}

    def ingest(self, params):
        if params.get("isHeartbeat") or not params.get("message"):
            return {"ingested": False}
        session = self.session(params["sessionId"])
        added = session.add(params["message"])
        if added:
            self.persist(session)
        return {"ingested": added}

    def ingestBatch(self, params):
        if params.get("isHeartbeat"):
            return {"ingestedCount": 0}
        session = self.session(params["sessionId"])
        count = sum(1 for m in params.get("messages", []) if session.add(m))
        if count:
            self.persist(session)
        return {"ingestedCount": count}

    def assemble(self, params):
        session = self.session(params["sessionId"])
        messages = session.messages if session.messages else params.get("messages", [])
        assembled = []
        if session.summary:
            assembled.append({"role": "compactionSummary", "summary": session.summary})
        assembled.extend(messages)
        addition = "Context is curated by the Python example engine."
        if session.summary:
            addition += " Older conversation is summarised in the first context entry."
        return {
            "messages": assembled,
            "estimatedTokens": estimate_tokens(messages, session.summary),
            "systemPromptAddition": addition,
            "contextProjection": {"mode": "thread_bootstrap", "epoch": "epoch-%d" % session.epoch},
        }

    def compact(self, params):
        session = self.session(params["sessionId"])
        tokens_before = estimate_tokens(session.messages, session.summary)
        budget = params.get("tokenBudget")
        over_budget = budget is not None and tokens_before > budget
        if not (params.get("force") or over_budget):
            return {"ok": True, "compacted": False, "reason": "within budget"}
        if len(session.messages) <= self.keep_recent:
            return {"ok": True, "compacted": False, "reason": "nothing older than the kept window"}
        folded = session.messages[: -self.keep_recent]
        kept = session.messages[-self.keep_recent :]
        lines = [session.summary] if session.summary else []
        for message in folded:
            text = message_text(message)[: self.summary_chars]
            lines.append("%s: %s" % (message.get("role"), text))
        session.summary = "\n".join(lines)
        session.messages = kept
        session.epoch += 1
        self.persist(session)
        result = {
            "summary": session.summary,
            "tokensBefore": tokens_before,
            "tokensAfter": estimate_tokens(session.messages, session.summary),
            "details": {"foldedMessages": len(folded), "epoch": "epoch-%d" % session.epoch},
        }
        if kept and kept[0].get("id"):
            result["firstKeptEntryId"] = kept[0]["id"]
        return {"ok": True, "compacted": True, "result": result}

    def commitTurn(self, params):
        session = self.session(params["sessionId"])
        key = params["advancementKey"]
        if key in session.committed_keys:
            return {"status": "duplicate"}
        for message in params.get("messages", []):
            session.add(message)
        session.committed_keys.append(key)
        # Messages and key land in one atomic write: a retry sees both or neither.
        self.persist(session)
        return {"status": "committed"}

    def maintain(self, params):
        session = self.session(params["sessionId"])
        return {
            "changed": False,
            "bytesFreed": 0,
            "rewrittenEntries": 0,
            "reason": "%d messages and %d committed turns stored"
            % (len(session.messages), len(session.committed_keys)),
        }

    def dispose(self, params):
        for session in self.sessions.values():
            self.persist(session)
        log("disposed")
        return None


METHODS = {
    "initialize",
    "bootstrap",
    "ingest",
    "ingestBatch",
    "assemble",
    "compact",
    "commitTurn",
    "maintain",
    "dispose",
}


def respond(engine, message):
    """The JSON-RPC response to one parsed message, or None for a notification.

    Notifications ($/cancelRequest) need nothing here: calls are answered in order, one at a
    time, so there is never a call in flight to cancel when one is read.
    """
    method = message.get("method")
    if "id" not in message:
        return None
    try:
        if method not in METHODS:
            raise RpcError(-32601, "method not found: %s" % method)
        result = getattr(engine, method)(message.get("params") or {})
        return {"jsonrpc": "2.0", "id": message["id"], "result": result}
    except RpcError as error:
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": error.code, "message": error.message},
        }
    except Exception as error:  # an engine bug becomes a JSON-RPC error, not a crash
        log("error in", method, repr(error))
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32000, "message": "%s failed: %r" % (method, error)},
        }


def main():
    engine = Engine()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError as error:
            log("ignoring a line that is not JSON:", error)
            continue
        response = respond(engine, message)
        if response is not None:
            sys.stdout.write(json.dumps(response) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
