//! A turn's responses: streaming each one and running the model's tool calls between them.

use responses_client::{
    output_item_text, ApiKey, CreateResponse, ResponseEvent, ResponsesClient, ResponsesError,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use super::super::{BackendError, TurnEvent, TurnTools, Usage};
use super::errors::backend_error;
use super::request::{follow_up_request, function_call_output, function_calls, MAX_TOOL_ROUNDS};
use super::ResponsesBackend;

impl ResponsesBackend {
    /// Runs a turn's responses: the first, then, while the model calls tools, the calls through
    /// the turn's executor and a follow-up carrying their outputs (at most
    /// [`MAX_TOOL_ROUNDS`] responses). Returns the last response's id, the text of all of them
    /// (as streamed) and the last usage.
    pub(super) async fn run_rounds(
        &self,
        client: &ResponsesClient,
        mut create: CreateResponse,
        tools: &TurnTools,
        events: &mpsc::Sender<TurnEvent>,
        thread_id: &str,
        api_key: Option<&ApiKey>,
    ) -> Result<(String, String, Option<Usage>), BackendError> {
        const OPERATION: &str = "run turn";
        let mut reply = String::new();
        for round in 1..=MAX_TOOL_ROUNDS {
            let mut calls = Vec::new();
            let (response_id, text, usage) = self
                .stream_turn(client, create.clone(), events, &mut calls, api_key)
                .await
                .map_err(|e| backend_error(OPERATION, thread_id, e))?;
            reply.push_str(&text);
            let invocations = function_calls(&calls);
            if invocations.is_empty() {
                return Ok((response_id, reply, usage));
            }
            if round == MAX_TOOL_ROUNDS {
                break;
            }
            for invocation in &invocations {
                tracing::info!(thread = %thread_id, tool = %invocation.name, call_id = %invocation.call_id, "the model called a tool");
            }
            let call_ids: Vec<String> = invocations.iter().map(|i| i.call_id.clone()).collect();
            let _ = events
                .send(TurnEvent::ToolCalls {
                    call_ids: call_ids.clone(),
                })
                .await;
            let outputs = call_ids
                .iter()
                .zip(tools.call_all(invocations).await)
                .map(|(call_id, output)| function_call_output(call_id, &output))
                .collect();
            create = follow_up_request(&create, &response_id, outputs);
        }
        Err(BackendError::TurnFailed {
            operation: OPERATION,
            message: format!(
                "the model was still calling tools after {MAX_TOOL_ROUNDS} responses; the turn was stopped"
            ),
        })
    }

    /// Streams one response, forwarding text deltas and collecting its `function_call`
    /// items into `calls`; returns (id, reply, usage).
    pub(super) async fn stream_turn(
        &self,
        client: &ResponsesClient,
        request: CreateResponse,
        events: &mpsc::Sender<TurnEvent>,
        calls: &mut Vec<Value>,
        api_key: Option<&ApiKey>,
    ) -> Result<(String, String, Option<Usage>), ResponsesError> {
        let mut stream = client.create_response_as(request, api_key).await?;
        let mut streamed = String::new();
        let mut item_text = String::new();
        while let Some(event) = stream.next().await {
            match event? {
                ResponseEvent::Created { response_id } => {
                    tracing::debug!(%response_id, "response created");
                }
                ResponseEvent::OutputTextDelta { delta } => {
                    streamed.push_str(&delta);
                    // A closed receiver only means nobody watches the stream.
                    let _ = events.send(TurnEvent::TextDelta(delta)).await;
                }
                ResponseEvent::OutputItemDone { item } => {
                    if let Some(text) = output_item_text(&item) {
                        item_text.push_str(&text);
                    }
                    if item.get("type").and_then(Value::as_str) == Some("function_call") {
                        calls.push(item);
                    }
                }
                ResponseEvent::Completed { response_id, usage } => {
                    let reply = if streamed.is_empty() && !item_text.is_empty() {
                        // The server sent whole items only: stream the text once so the
                        // deltas still add up to the reply.
                        let _ = events.send(TurnEvent::TextDelta(item_text.clone())).await;
                        item_text
                    } else {
                        streamed
                    };
                    let usage = usage.map(|u| Usage {
                        input_tokens: u.input_tokens,
                        output_tokens: u.output_tokens,
                        cached_input_tokens: u.cached_tokens,
                    });
                    return Ok((response_id, reply, usage));
                }
            }
        }
        // The client's stream always ends with `Completed` or an error.
        Err(ResponsesError::StreamClosed {
            operation: "run turn",
            response_id: None,
        })
    }
}
