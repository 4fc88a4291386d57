//! A scripted stand-in for `codex app-server`, for the client's deterministic tests.
//!
//! It speaks the same JSONL framing and the subset of methods the client uses. Threads persist as
//! files under `$CODEX_HOME/fake-threads/` so a new process can `thread/resume` them. The text of
//! a `turn/start` picks a behaviour:
//! - `noisy…`: before answering, writes garbage (non-JSON, a JSON array, a blank line), an
//!   unknown notification, a notification for another thread, a line of `FAKE_HUGE_BYTES` bytes
//!   (default 65536) and a server request; then a normal turn.
//! - `retry…`: an agent message that is abandoned by a `willRetry` error, then a new one.
//! - `fail…`: a final `error` and `turn/completed` with status `failed`.
//! - `die…`: starts the turn, streams one delta, then exits with status 137.
//! - `hold…`: starts the turn and one delta, then waits; the next `turn/start` interleaves the
//!   held turn's remaining events with its own; `turn/interrupt` ends it as interrupted.
//! - `endless…`: starts the turn and streams a delta `tick ` every few milliseconds until
//!   `turn/interrupt` ends it as interrupted (a model that never stops).
//! - anything else: a normal turn replying `fake reply to: <text>` (plus ` (injected N)` when
//!   items were injected into the thread).
//!
//! Extra methods: `fake/echo {value, hold}` (a held echo is answered after the next one, to
//! test id matching), `fake/state` (what the fake observed: among others the params of every
//! `turn/start`, `thread/resume` and `turn/interrupt`), `fake/never` (never answered),
//! `fake/exit` (exits at once without answering).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct HeldTurn {
    thread_id: String,
    turn_id: String,
    item_id: String,
}

#[derive(Default)]
struct Fake {
    initialized: bool,
    home: PathBuf,
    loaded: HashSet<String>,
    injected: HashMap<String, usize>,
    next: u64,
    held_echo: Option<(Value, Value)>,
    held_turn: Option<HeldTurn>,
    server_request_replies: Vec<Value>,
    initialize_params: Value,
    endless_turn: Option<EndlessTurn>,
    turn_start_params: Vec<Value>,
    resume_params: Vec<Value>,
    interrupts: Vec<Value>,
}

/// A turn streaming deltas from a thread of its own until told to stop.
struct EndlessTurn {
    stop: Arc<AtomicBool>,
    ticker: JoinHandle<()>,
}

impl EndlessTurn {
    fn start(thread_id: String, turn_id: String, item_id: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let ticker = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                let delta = json!({"threadId": thread_id, "turnId": turn_id, "itemId": item_id, "delta": "tick "});
                if notify("item/agentMessage/delta", delta).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = notify(
                "turn/completed",
                json!({"threadId": thread_id, "turn": {"id": turn_id, "status": "interrupted", "items": [], "error": null}}),
            );
        });
        Self { stop, ticker }
    }

    /// Stop streaming; the ticker ends the turn as interrupted.
    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        if self.ticker.join().is_err() {
            eprintln!("fake-app-server: the endless turn's ticker panicked");
        }
    }
}

fn send(message: &Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{message}")?;
    out.flush()?;
    Ok(())
}

fn send_raw(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

fn notify(method: &str, params: Value) -> Result<()> {
    send(&json!({"method": method, "params": params, "emittedAtMs": 1}))
}

fn respond(id: &Value, result: Value) -> Result<()> {
    send(&json!({"id": id, "result": result}))
}

fn respond_error(id: &Value, message: &str) -> Result<()> {
    send(&json!({"id": id, "error": {"code": -32600, "message": message}}))
}

impl Fake {
    fn next_id(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}-{}-{}", std::process::id(), self.next)
    }

    fn thread_file(&self, thread_id: &str) -> PathBuf {
        self.home.join("fake-threads").join(thread_id)
    }

    fn handle(&mut self, message: &Value) -> Result<()> {
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            // A response to one of our server requests.
            self.server_request_replies.push(message.clone());
            return Ok(());
        };
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = message.get("id").cloned() else {
            if method == "initialized" {
                self.initialized = true;
            }
            return Ok(());
        };
        if method != "initialize" && !self.initialized {
            return respond_error(&id, "Not initialized");
        }
        let thread_id = params
            .get("threadId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        match method {
            "initialize" => {
                self.initialize_params = params.clone();
                let args: Vec<String> = std::env::args().skip(1).collect();
                respond(
                    &id,
                    json!({
                        "userAgent": std::env::var("FAKE_USER_AGENT").unwrap_or_else(|_| "fake-app-server/0.0.0".to_owned()),
                        "codexHome": self.home,
                        "platformFamily": "unix",
                        "platformOs": "linux",
                        "args": args,
                        "clientInfo": params.get("clientInfo"),
                        "capabilities": params.get("capabilities"),
                        "fakeEnv": std::env::var("FAKE_ENV").ok(),
                    }),
                )
            }
            "thread/start" => {
                let thread_id = self.next_id("thr");
                std::fs::create_dir_all(self.home.join("fake-threads"))?;
                std::fs::write(self.thread_file(&thread_id), params.to_string())?;
                self.loaded.insert(thread_id.clone());
                let thread = json!({"id": thread_id, "path": self.thread_file(&thread_id), "status": {"type": "idle"}, "turns": []});
                respond(
                    &id,
                    json!({"thread": thread, "model": params.get("model").cloned().unwrap_or(json!("fake-model")), "modelProvider": "fake"}),
                )?;
                notify("thread/started", json!({"thread": thread}))
            }
            "thread/resume" => {
                self.resume_params.push(params.clone());
                if self.thread_file(&thread_id).is_file() {
                    self.loaded.insert(thread_id.clone());
                    let thread =
                        json!({"id": thread_id, "path": self.thread_file(&thread_id), "turns": []});
                    respond(
                        &id,
                        json!({"thread": thread, "model": "fake-model", "modelProvider": "fake", "excludeTurns": params.get("excludeTurns")}),
                    )
                } else {
                    respond_error(&id, &format!("no rollout found for thread id {thread_id}"))
                }
            }
            "thread/inject_items" => {
                if !self.loaded.contains(&thread_id) {
                    return respond_error(&id, &format!("thread not found: {thread_id}"));
                }
                let count = params
                    .get("items")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                *self.injected.entry(thread_id).or_default() += count;
                respond(&id, json!({}))
            }
            "thread/compact/start" => {
                if !self.loaded.contains(&thread_id) {
                    return respond_error(&id, &format!("thread not found: {thread_id}"));
                }
                respond(&id, json!({}))?;
                let turn_id = self.next_id("turn");
                let item_id = self.next_id("item");
                notify(
                    "turn/started",
                    json!({"threadId": thread_id, "turn": {"id": turn_id, "status": "inProgress", "items": []}}),
                )?;
                let item = json!({"type": "contextCompaction", "id": item_id});
                notify(
                    "item/started",
                    json!({"threadId": thread_id, "turnId": turn_id, "item": item}),
                )?;
                notify(
                    "item/completed",
                    json!({"threadId": thread_id, "turnId": turn_id, "item": item}),
                )?;
                notify(
                    "turn/completed",
                    json!({"threadId": thread_id, "turn": {"id": turn_id, "status": "completed", "items": [], "error": null}}),
                )
            }
            "turn/start" => self.turn_start(&id, &thread_id, &params),
            "turn/interrupt" => {
                self.interrupts.push(params.clone());
                respond(&id, json!({}))?;
                if let Some(endless) = self.endless_turn.take() {
                    endless.stop();
                }
                if let Some(held) = self.held_turn.take() {
                    notify(
                        "turn/completed",
                        json!({"threadId": held.thread_id, "turn": {"id": held.turn_id, "status": "interrupted", "items": [], "error": null}}),
                    )?;
                }
                Ok(())
            }
            "fake/echo" => {
                let hold = params.get("hold").and_then(Value::as_bool) == Some(true);
                if hold {
                    self.held_echo = Some((id, params));
                    return Ok(());
                }
                respond(&id, json!({"echo": params.get("value")}))?;
                if let Some((held_id, held_params)) = self.held_echo.take() {
                    respond(&held_id, json!({"echo": held_params.get("value")}))?;
                }
                Ok(())
            }
            "fake/state" => respond(
                &id,
                json!({
                    "serverRequestReplies": self.server_request_replies,
                    "injected": self.injected,
                    "initializeParams": self.initialize_params,
                    "initialized": self.initialized,
                    "args": std::env::args().skip(1).collect::<Vec<_>>(),
                    "fakeEnv": std::env::var("FAKE_ENV").ok(),
                    "turnStartParams": self.turn_start_params,
                    "resumeParams": self.resume_params,
                    "interrupts": self.interrupts,
                }),
            ),
            "fake/never" => Ok(()),
            "fake/exit" => std::process::exit(3),
            other => send(
                &json!({"id": id, "error": {"code": -32601, "message": format!("method not found: {other}")}}),
            ),
        }
    }

    fn turn_start(&mut self, id: &Value, thread_id: &str, params: &Value) -> Result<()> {
        self.turn_start_params.push(params.clone());
        if !self.loaded.contains(thread_id) {
            return respond_error(id, &format!("thread not found: {thread_id}"));
        }
        let text = params
            .pointer("/input/0/text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let turn_id = self.next_id("turn");
        if text.starts_with("noisy") {
            send_raw("this is not json")?;
            send_raw("")?;
            send_raw("[1, 2, 3]")?;
            notify("fake/unknownNotification", json!({"threadId": thread_id}))?;
            notify(
                "item/agentMessage/delta",
                json!({"threadId": "some-other-thread", "turnId": "x", "itemId": "x", "delta": "LEAK"}),
            )?;
            let huge: usize = std::env::var("FAKE_HUGE_BYTES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(65536);
            let payload = "H".repeat(huge);
            notify(
                "item/agentMessage/delta",
                json!({"threadId": thread_id, "turnId": turn_id, "itemId": "huge", "delta": payload}),
            )?;
            send(
                &json!({"id": "srv-1", "method": "item/commandExecution/requestApproval", "params": {"threadId": thread_id}}),
            )?;
        }
        respond(
            id,
            json!({"turn": {"id": turn_id, "status": "inProgress", "items": [], "error": null}}),
        )?;
        notify(
            "turn/started",
            json!({"threadId": thread_id, "turn": {"id": turn_id, "status": "inProgress", "items": []}}),
        )?;
        let user_item = json!({"type": "userMessage", "id": self.next_id("item"), "content": [{"type": "text", "text": text}]});
        notify(
            "item/started",
            json!({"threadId": thread_id, "turnId": turn_id, "item": user_item}),
        )?;
        notify(
            "item/completed",
            json!({"threadId": thread_id, "turnId": turn_id, "item": user_item}),
        )?;
        let item_id = self.next_id("item");
        let agent = |text: &str, item_id: &str| json!({"type": "agentMessage", "id": item_id, "text": text});
        let delta = |item_id: &str, delta: &str| json!({"threadId": thread_id, "turnId": turn_id, "itemId": item_id, "delta": delta});
        let completed = |status: &str, error: Value| json!({"threadId": thread_id, "turn": {"id": turn_id, "status": status, "items": [], "error": error}});

        if text.starts_with("hold") {
            notify(
                "item/started",
                json!({"threadId": thread_id, "turnId": turn_id, "item": agent("", &item_id)}),
            )?;
            notify("item/agentMessage/delta", delta(&item_id, "held "))?;
            self.held_turn = Some(HeldTurn {
                thread_id: thread_id.to_owned(),
                turn_id,
                item_id,
            });
            return Ok(());
        }
        if text.starts_with("endless") {
            notify(
                "item/started",
                json!({"threadId": thread_id, "turnId": turn_id, "item": agent("", &item_id)}),
            )?;
            self.endless_turn = Some(EndlessTurn::start(thread_id.to_owned(), turn_id, item_id));
            return Ok(());
        }
        if text.starts_with("die") {
            notify(
                "item/started",
                json!({"threadId": thread_id, "turnId": turn_id, "item": agent("", &item_id)}),
            )?;
            notify("item/agentMessage/delta", delta(&item_id, "about to "))?;
            eprintln!("fake-app-server: dying on purpose");
            std::process::exit(137);
        }
        if text.starts_with("fail") {
            notify(
                "error",
                json!({"threadId": thread_id, "turnId": turn_id, "willRetry": false, "error": {"message": "unexpected status 500 Internal Server Error", "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 500}}}}),
            )?;
            return notify(
                "turn/completed",
                completed(
                    "failed",
                    json!({"message": "unexpected status 500 Internal Server Error"}),
                ),
            );
        }
        if text.starts_with("retry") {
            notify(
                "item/started",
                json!({"threadId": thread_id, "turnId": turn_id, "item": agent("", &item_id)}),
            )?;
            notify(
                "item/agentMessage/delta",
                delta(&item_id, "abandoned partial"),
            )?;
            notify(
                "error",
                json!({"threadId": thread_id, "turnId": turn_id, "willRetry": true, "error": {"message": "Reconnecting... 1/5"}}),
            )?;
        }

        let reply = match self.injected.get(thread_id) {
            Some(n) if *n > 0 => format!("fake reply to: {text} (injected {n})"),
            _ => format!("fake reply to: {text}"),
        };
        let item_id = self.next_id("item");
        let (first, second) = reply.split_at(reply.len() / 2);
        let held = self.held_turn.take();
        notify(
            "item/started",
            json!({"threadId": thread_id, "turnId": turn_id, "item": agent("", &item_id)}),
        )?;
        if let Some(held) = &held {
            notify(
                "item/agentMessage/delta",
                json!({"threadId": held.thread_id, "turnId": held.turn_id, "itemId": held.item_id, "delta": "and released"}),
            )?;
        }
        notify("item/agentMessage/delta", delta(&item_id, first))?;
        if let Some(held) = &held {
            notify(
                "item/completed",
                json!({"threadId": held.thread_id, "turnId": held.turn_id, "item": agent("held and released", &held.item_id)}),
            )?;
            notify(
                "turn/completed",
                json!({"threadId": held.thread_id, "turn": {"id": held.turn_id, "status": "completed", "items": [], "error": null}}),
            )?;
        }
        notify("item/agentMessage/delta", delta(&item_id, second))?;
        notify(
            "item/completed",
            json!({"threadId": thread_id, "turnId": turn_id, "item": agent(&reply, &item_id)}),
        )?;
        notify(
            "thread/tokenUsage/updated",
            json!({"threadId": thread_id, "turnId": turn_id, "tokenUsage": {"total": {"totalTokens": 10}, "last": {"totalTokens": 10}}}),
        )?;
        notify("turn/completed", completed("completed", Value::Null))
    }
}

fn main() -> Result<()> {
    let home = std::env::var_os("CODEX_HOME").ok_or("CODEX_HOME is not set")?;
    let mut fake = Fake {
        home: PathBuf::from(home),
        ..Fake::default()
    };
    if !fake.home.is_dir() {
        eprintln!("fake-app-server: CODEX_HOME does not exist");
        std::process::exit(1);
    }
    if std::env::var_os("FAKE_EXIT_AT_START").is_some() {
        eprintln!("fake-app-server: exiting at start as asked");
        std::process::exit(2);
    }
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        match serde_json::from_str::<Value>(&line) {
            Ok(message) => fake.handle(&message)?,
            Err(_) => eprintln!("fake-app-server: ignoring a non-JSON line"),
        }
    }
    Ok(())
}
