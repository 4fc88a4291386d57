//! A response's harness turn, run in a task of its own and heard through its progress.
//!
//! A turn whose model calls the client's function tools outlives the response that shows the
//! calls: the response ends with them (as the API's does), and the turn waits, parked under
//! its engine session, for the request that brings their outputs (`function_call_output`).
//! That request's response then follows the same turn on. The engine sees one turn: the
//! user's message and the model's final answer. A turn left waiting longer than
//! `serve.responses.toolOutputTimeoutSecs` is cancelled, and nothing of it is kept.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use super::handlers::Pending;
use super::wire::{ApiError, ToolOutputItem};
use super::ResponsesFront;
use crate::backend::{
    ToolExecutor, ToolInvocation, ToolOutput, TurnEvent, TurnOptions, TurnOutcome, TurnTools, Usage,
};
use crate::harness::{Harness, HarnessError, TurnReport, TurnSpec};
use crate::util::sync::lock;

/// What a turn tells the response that follows it, in order.
pub(super) enum Progress {
    /// A piece of the reply text.
    Delta(String),
    /// The model called the client's functions: the response ends with the calls, and the
    /// turn waits for their outputs (sent on `outputs`, in the calls' order).
    Calls {
        calls: Vec<ToolInvocation>,
        outputs: oneshot::Sender<Vec<ToolOutput>>,
    },
    /// The model has answered: the response ends with the answer, then says so on `ended`
    /// (or drops it); then the harness records the turn (while the response is kept) and the
    /// engine's `afterTurn` and maintenance run (see [`TurnSpec::on_answered`]).
    Answered {
        answer: Answer,
        ended: oneshot::Sender<()>,
    },
    /// The turn ended. After [`Progress::Answered`] nobody listens any more (the turn's task
    /// logs a failure after the answer); without it, this is how the response learns that the
    /// turn failed.
    Ended(Box<Result<TurnReport, HarnessError>>),
}

/// A turn's answer: the reply and the backend's token counts.
pub(super) struct Answer {
    pub reply: String,
    pub usage: Option<Usage>,
}

/// Progress waiting for the response that follows the turn.
const PROGRESS_QUEUE: usize = 256;
/// How long the engine's work after a turn waits for the response to end with the answer (a
/// client that does not read holds it back no longer than this).
const ANSWER_WAIT: Duration = Duration::from_secs(1);
/// Reply events waiting to become progress.
const EVENT_QUEUE: usize = 256;

/// A turn running in its own task.
pub(super) struct RunningTurn {
    pub progress: mpsc::Receiver<Progress>,
    pub task: AbortHandle,
    /// Set once the model has answered: from then on the turn runs to its end (its record
    /// and the engine's work after it) whoever still listens.
    pub answered: Arc<AtomicBool>,
    /// Resolves once the harness has recorded the turn, or the turn has ended unrecorded
    /// (taken by the response that ends with the answer).
    pub recorded: Option<oneshot::Receiver<()>>,
    /// How many responses before this one ended with this turn's calls (its reply text spans
    /// them all).
    pub rounds: usize,
}

/// A turn waiting on the outputs of its model's calls.
pub(super) struct Parked {
    /// The response that ended with the calls.
    pub response_id: String,
    pub turn: RunningTurn,
    pub call_ids: Vec<String>,
    pub outputs: oneshot::Sender<Vec<ToolOutput>>,
}

/// The parked turns, by engine session.
#[derive(Default)]
pub(super) struct ParkedTurns(Mutex<HashMap<String, Parked>>);

impl ResponsesFront {
    /// The turn `pending` answers with: a new one, or, when it brings function call outputs,
    /// the parked turn of its session (given the outputs). What does not fit is refused as
    /// the API refuses it, and a parked turn stays parked.
    pub(super) fn turn_for(self: &Arc<Self>, pending: &Pending) -> Result<RunningTurn, ApiError> {
        let request = &pending.request;
        let mut parked = lock(&self.parked.0);
        let Some(waiting) = parked.get(&pending.session_key) else {
            if let Some(output) = request.tool_outputs.first() {
                return Err(ApiError::invalid(
                    Some("input"),
                    format!(
                        "No tool call found for function call output with call_id {}.",
                        output.call_id
                    ),
                ));
            }
            drop(parked);
            return Ok(self.start_turn(pending));
        };
        if let Some(previous) = &request.previous_response_id {
            if previous != &waiting.response_id {
                return Err(ApiError::invalid(
                    Some("previous_response_id"),
                    format!(
                        "The model's turn in this chain waits on the outputs of the function calls of response '{}'; continue from it.",
                        waiting.response_id
                    ),
                ));
            }
        }
        let outputs = outputs_in_call_order(&waiting.call_ids, &request.tool_outputs)?;
        let Some(waiting) = parked.remove(&pending.session_key) else {
            return Err(ApiError::server("the parked turn went away"));
        };
        drop(parked);
        if waiting.outputs.send(outputs).is_err() {
            return Err(ApiError::server(
                "the turn waiting on these outputs has ended",
            ));
        }
        tracing::info!(session = %pending.session_key, response = %pending.id, "responses front: the client's function outputs go on with the waiting turn");
        Ok(RunningTurn {
            rounds: waiting.turn.rounds + 1,
            ..waiting.turn
        })
    }

    /// Starts the turn of `pending` in a task of its own.
    fn start_turn(self: &Arc<Self>, pending: &Pending) -> RunningTurn {
        let (progress, progress_rx) = mpsc::channel(PROGRESS_QUEUE);
        let (rounds, rounds_rx) = mpsc::channel(1);
        let answered_mark = Arc::new(AtomicBool::new(false));
        let mark = answered_mark.clone();
        let (answered, answered_rx) = oneshot::channel();
        let answered = Mutex::new(Some(answered));
        let (recorded, recorded_rx) = oneshot::channel();
        let recorded = Mutex::new(Some(recorded));
        let settings = &pending.request.settings;
        let mut spec = TurnSpec::new(pending.session_key.clone(), pending.prompt.clone())
            .when_answered(Arc::new(move |outcome: &TurnOutcome| {
                mark.store(true, Ordering::SeqCst);
                if let Some(answered) = lock(&answered).take() {
                    let _ = answered.send(Answer {
                        reply: outcome.reply.clone(),
                        usage: outcome.usage,
                    });
                }
            }))
            .when_recorded(Arc::new(move |_: &TurnOutcome| {
                if let Some(recorded) = lock(&recorded).take() {
                    let _ = recorded.send(());
                }
            }))
            .with_options(TurnOptions {
                instructions: pending.instructions(),
                max_output_tokens: settings.max_output_tokens,
                tool_choice: settings.tool_choice.clone(),
                api_key: pending.caller.api_key.clone(),
                connection_pool: pending.caller.lane,
            });
        let specs = settings.tool_specs();
        if !specs.is_empty() {
            spec = spec.with_tools(TurnTools::new(specs, Arc::new(ClientTools { rounds })));
        }
        let task = tokio::spawn(drive(
            self.harness.clone(),
            spec,
            progress,
            rounds_rx,
            answered_rx,
        ));
        RunningTurn {
            progress: progress_rx,
            task: task.abort_handle(),
            answered: answered_mark,
            recorded: Some(recorded_rx),
            rounds: 0,
        }
    }

    /// Parks `turn` under `session_key` until a request brings the outputs of `call_ids`
    /// (made in response `response_id`), or the wait times out and the turn is cancelled.
    pub(super) fn park(
        self: &Arc<Self>,
        session_key: &str,
        response_id: &str,
        turn: RunningTurn,
        call_ids: Vec<String>,
        outputs: oneshot::Sender<Vec<ToolOutput>>,
    ) {
        let parked = Parked {
            response_id: response_id.to_owned(),
            turn,
            call_ids,
            outputs,
        };
        if let Some(old) = lock(&self.parked.0).insert(session_key.to_owned(), parked) {
            // A session runs one turn at a time (the harness's lock): not reached.
            old.turn.task.abort();
        }
        let front: Weak<ResponsesFront> = Arc::downgrade(self);
        let (session_key, response_id) = (session_key.to_owned(), response_id.to_owned());
        let wait = self.tool_output_wait;
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(front) = front.upgrade() else { return };
            let mut parked = lock(&front.parked.0);
            if parked
                .get(&session_key)
                .is_some_and(|p| p.response_id == response_id)
            {
                if let Some(expired) = parked.remove(&session_key) {
                    tracing::warn!(session = %session_key, response = %response_id, wait_secs = wait.as_secs(), "responses front: no function outputs came for the model's calls; the turn is cancelled and nothing of it kept");
                    expired.turn.task.abort();
                }
            }
        });
    }

    /// Whether a turn of `session_key` waits on its client's function outputs.
    pub(super) fn waits_on_tool_outputs(&self, session_key: &str) -> bool {
        lock(&self.parked.0).contains_key(session_key)
    }

    /// Cancels every parked turn (the front is shutting down).
    pub(super) fn cancel_parked(&self) {
        for (_, parked) in lock(&self.parked.0).drain() {
            parked.turn.task.abort();
        }
    }
}

/// The outputs for `call_ids`, in their order, from the client's output items; a call without
/// an output, or an output of no call, is refused as the API refuses it.
fn outputs_in_call_order(
    call_ids: &[String],
    given: &[ToolOutputItem],
) -> Result<Vec<ToolOutput>, ApiError> {
    if let Some(stray) = given.iter().find(|o| !call_ids.contains(&o.call_id)) {
        return Err(ApiError::invalid(
            Some("input"),
            format!(
                "No tool call found for function call output with call_id {}.",
                stray.call_id
            ),
        ));
    }
    call_ids
        .iter()
        .map(|call_id| {
            given
                .iter()
                .find(|o| &o.call_id == call_id)
                .map(|o| ToolOutput::text(o.output.clone()))
                .ok_or_else(|| {
                    ApiError::invalid(
                        Some("input"),
                        format!("No tool output found for function call {call_id}."),
                    )
                })
        })
        .collect()
}

/// The calls of one model response asked of the client.
struct ToolRound {
    calls: Vec<ToolInvocation>,
    outputs: oneshot::Sender<Vec<ToolOutput>>,
}

/// Hands the model's calls of the client's functions to the turn's driver, and waits for the
/// outputs the client sends.
struct ClientTools {
    rounds: mpsc::Sender<ToolRound>,
}

#[async_trait]
impl ToolExecutor for ClientTools {
    async fn call(&self, invocation: ToolInvocation) -> ToolOutput {
        let mut outputs = self.call_all(vec![invocation]).await;
        outputs
            .pop()
            .unwrap_or_else(|| ToolOutput::error("the client gave no output for the call"))
    }

    async fn call_all(&self, calls: Vec<ToolInvocation>) -> Vec<ToolOutput> {
        let count = calls.len();
        let (outputs, outputs_rx) = oneshot::channel();
        let failed = |why: &str| vec![ToolOutput::error(why); count];
        if self
            .rounds
            .send(ToolRound { calls, outputs })
            .await
            .is_err()
        {
            return failed("the client's function could not be asked for: the turn is ending");
        }
        outputs_rx
            .await
            .unwrap_or_else(|_| failed("the client gave no output for the call"))
    }
}

/// Runs the harness turn of `spec` and tells its progress. A round of the client's calls is
/// told once the backend has announced it ([`TurnEvent::ToolCalls`]): the text streamed
/// before the calls is told before them. The answer (`answered`) is told as soon as the
/// harness has it, before the harness records it, after the text streamed before it; a
/// failure after it (not recorded) is logged here, since the client has the answer.
async fn drive(
    harness: Arc<Harness>,
    spec: TurnSpec,
    progress: mpsc::Sender<Progress>,
    mut rounds: mpsc::Receiver<ToolRound>,
    mut answered: oneshot::Receiver<Answer>,
) {
    let (events, mut events_rx) = mpsc::channel(EVENT_QUEUE);
    let turn = harness.turn_streaming(spec, Some(events));
    tokio::pin!(turn);
    let mut announced: HashSet<String> = HashSet::new();
    let mut waiting: Option<ToolRound> = None;
    let mut told = false;
    let outcome = loop {
        tokio::select! {
            biased;
            Some(event) = events_rx.recv() => match event {
                TurnEvent::TextDelta(delta) => {
                    let _ = progress.send(Progress::Delta(delta)).await;
                }
                TurnEvent::ToolCalls { call_ids } => announced.extend(call_ids),
                TurnEvent::RetryDiscarded { .. } | TurnEvent::Compacted { .. } => {}
            },
            Some(round) = rounds.recv(), if waiting.is_none() => waiting = Some(round),
            answer = &mut answered, if !told => {
                told = true;
                if let Ok(answer) = answer {
                    tell_text(&mut events_rx, &progress).await;
                    let (ended, response_ended) = oneshot::channel();
                    let _ = progress.send(Progress::Answered { answer, ended }).await;
                    // The turn's record and the engine's afterTurn run here, in this task, once
                    // the response has ended: otherwise the response's task, woken on this
                    // thread, would wait for them, and so would the server's write of the last
                    // event (the yield).
                    let _ = tokio::time::timeout(ANSWER_WAIT, response_ended).await;
                    tokio::task::yield_now().await;
                }
            }
            outcome = &mut turn => break outcome,
        }
        if let Some(round) = ready_round(&mut waiting, &announced) {
            let _ = progress
                .send(Progress::Calls {
                    calls: round.calls,
                    outputs: round.outputs,
                })
                .await;
        }
    };
    tell_text(&mut events_rx, &progress).await;
    if told {
        if let Err(error) = &outcome {
            tracing::error!(%error, "responses front: the turn failed after its client had the answer (its record, or the engine's work after it)");
        }
    }
    let _ = progress.send(Progress::Ended(Box::new(outcome))).await;
}

/// The round of calls waiting in `waiting`, once the backend has announced all its calls; a
/// round that came before its announcement (the two travel different channels) stays.
fn ready_round(waiting: &mut Option<ToolRound>, announced: &HashSet<String>) -> Option<ToolRound> {
    waiting.take_if(|round| {
        round
            .calls
            .iter()
            .all(|call| announced.contains(&call.call_id))
    })
}

/// Tells the text the backend has streamed and `drive` has not told yet.
async fn tell_text(events: &mut mpsc::Receiver<TurnEvent>, progress: &mpsc::Sender<Progress>) {
    while let Ok(event) = events.try_recv() {
        if let TurnEvent::TextDelta(delta) = event {
            let _ = progress.send(Progress::Delta(delta)).await;
        }
    }
}

/// How long a parked turn waits, from `serve.responses.toolOutputTimeoutSecs`.
pub(super) fn tool_output_wait(secs: u64) -> Duration {
    Duration::from_secs(secs.max(1))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn given(call_id: &str, output: &str) -> ToolOutputItem {
        ToolOutputItem {
            call_id: call_id.into(),
            output: output.into(),
        }
    }

    /// A round of calls that comes before the backend announced them waits (its outputs'
    /// sender kept, so the turn still hears from the client), and is handed on once they are.
    #[test]
    fn a_round_before_its_announcement_waits_for_it() {
        let (outputs, mut outputs_rx) = oneshot::channel();
        let call = |id: &str| ToolInvocation {
            call_id: id.into(),
            name: "f".into(),
            arguments: serde_json::Value::Null,
        };
        let mut waiting = Some(ToolRound {
            calls: vec![call("a"), call("b")],
            outputs,
        });
        let mut announced = HashSet::from(["a".to_owned()]);
        assert!(ready_round(&mut waiting, &announced).is_none());
        assert!(waiting.is_some(), "the round is kept");
        assert!(matches!(
            outputs_rx.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        ));
        announced.insert("b".to_owned());
        let round = ready_round(&mut waiting, &announced).unwrap();
        assert_eq!(round.calls.len(), 2);
        assert!(waiting.is_none());
    }

    /// Outputs go to the turn in the order of its calls, whatever order the client sent.
    #[test]
    fn outputs_follow_the_calls_order() {
        let calls = vec!["a".to_owned(), "b".to_owned()];
        let outputs = outputs_in_call_order(&calls, &[given("b", "2"), given("a", "1")]).unwrap();
        assert_eq!(outputs, vec![ToolOutput::text("1"), ToolOutput::text("2")]);
    }

    /// A missing output and a stray one are refused, naming the call id.
    #[test]
    fn missing_and_stray_outputs_are_refused() {
        let calls = vec!["a".to_owned(), "b".to_owned()];
        let missing = outputs_in_call_order(&calls, &[given("a", "1")]).unwrap_err();
        assert_eq!(missing.status, 400);
        assert!(missing.message.contains("function call b"), "{missing}");
        let stray =
            outputs_in_call_order(&calls, &[given("a", "1"), given("b", "2"), given("z", "")])
                .unwrap_err();
        assert!(stray.message.contains("call_id z"), "{stray}");
    }
}
