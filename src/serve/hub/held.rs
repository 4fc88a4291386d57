//! Held completions: an engine session's turn is over for its client only when ctxbridge is
//! done with it, not when the upstream is. The upstream's `turn/completed` of such a turn goes
//! to the harness at once (it records the turn on it) but to the clients only once the turn is
//! settled ([`TurnEnd`]): as the upstream sent it when the turn was recorded or the upstream
//! ended it itself; as failed, after an `error` notification naming the reason, when
//! ctxbridge failed it after the upstream accepted it (the answer could not be recorded, a
//! turn limit cut it off). A client thus always hears how its turn ended.

use serde_json::{json, Value};

use super::relay::turn_error;
use super::Hub;
use crate::serve::seam::TurnEnd;

/// A session turn whose completion waits to be settled.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// The turn (unknown for a compaction until its `turn/started`).
    turn: Option<String>,
    /// The upstream's completion (backend ids, user input shown), once it came.
    completion: Option<Value>,
    /// How ctxbridge ended it, once it did.
    end: Option<TurnEnd>,
}

impl Held {
    /// Whether a notification naming `turn` is about this held turn.
    fn is_of(&self, turn: Option<&str>) -> bool {
        match (&self.turn, turn) {
            (Some(held), Some(turn)) => held == turn,
            _ => true,
        }
    }
}

/// The status of a `turn/completed`'s turn.
fn status(completion: &Value) -> Option<&str> {
    completion.pointer("/turn/status").and_then(Value::as_str)
}

impl Hub {
    /// The turn the upstream accepted on `thread` (`turn` when its answer named it) is held.
    pub(super) fn hold(&mut self, thread: String, turn: Option<String>) {
        self.held.insert(
            thread,
            Held {
                turn,
                ..Held::default()
            },
        );
    }

    /// A `turn/completed` on `thread` about to go to the clients: given back to relay now, or
    /// kept (`None`) until its turn is settled. One the upstream reports failed goes at once:
    /// the upstream told the clients how it ended (a retry on a new thread may follow).
    pub(super) fn held_completion(&mut self, thread: &str, completion: Value) -> Option<Value> {
        let turn = completion.pointer("/turn/id").and_then(Value::as_str);
        let Some(held) = self.held.get_mut(thread).filter(|held| held.is_of(turn)) else {
            return Some(completion);
        };
        if status(&completion) == Some("failed") {
            self.held.remove(thread);
            return Some(completion);
        }
        match held.end.take() {
            Some(end) => {
                self.held.remove(thread);
                self.release(thread, completion, end);
                None
            }
            None => {
                held.completion = Some(completion);
                None
            }
        }
    }

    /// ctxbridge is done with the turn on `thread`: its completion goes to the clients (now,
    /// or when it comes). A failure whose completion has not come ends the turn for the
    /// clients now, and the upstream's later completion is dropped: it may never come.
    pub(super) fn settle(&mut self, thread: &str, turn: Option<String>, end: TurnEnd) {
        let Some(held) = self
            .held
            .get_mut(thread)
            .filter(|held| held.is_of(turn.as_deref()))
        else {
            tracing::debug!(%thread, ?turn, ?end, "serve: a settled turn was not held (its completion went as the upstream sent it)");
            return;
        };
        if let Some(completion) = held.completion.take() {
            self.held.remove(thread);
            self.release(thread, completion, end);
            return;
        }
        let running = held
            .turn
            .clone()
            .or_else(|| self.active_turns.get(thread).cloned());
        match (end, running) {
            (TurnEnd::Failed(message), Some(turn)) => {
                self.held.remove(thread);
                self.fail_turn(thread, &turn, &message);
                self.failed_turns.insert(turn);
            }
            (end, _) => {
                if let Some(held) = self.held.get_mut(thread) {
                    held.end = Some(end);
                }
            }
        }
    }

    /// Whether a completion the upstream sent waits to be settled (shutdown waits for it).
    pub(super) fn holds_completions(&self) -> bool {
        self.held.values().any(|held| held.completion.is_some())
    }

    /// Shutdown's grace is over: the held completions go to the clients as the upstream sent
    /// them.
    pub(super) fn release_all_held(&mut self) {
        for (thread, held) in std::mem::take(&mut self.held) {
            if let Some(completion) = held.completion {
                self.release(&thread, completion, TurnEnd::AsUpstream);
            }
        }
    }

    /// Shows the clients a held turn's completion as `end` says.
    fn release(&mut self, thread: &str, mut completion: Value, end: TurnEnd) {
        let TurnEnd::Failed(message) = end else {
            self.relay_to_clients("turn/completed", Some(thread.to_owned()), completion);
            return;
        };
        tracing::warn!(%thread, %message, "serve: the upstream completed a turn that ctxbridge failed; its clients are told so");
        let error = json!({"message": message});
        let turn = completion
            .pointer("/turn/id")
            .cloned()
            .unwrap_or(Value::Null);
        self.relay_to_clients(
            "error",
            Some(thread.to_owned()),
            turn_error(thread, turn, &error),
        );
        if let Some(object) = completion.get_mut("turn").and_then(Value::as_object_mut) {
            object.insert("status".to_owned(), json!("failed"));
            object.insert("error".to_owned(), error);
        }
        self.relay_to_clients("turn/completed", Some(thread.to_owned()), completion);
    }
}
