//! A fleet of three `ctxbridge` processes on one PostgreSQL schema and one Responses-compatible
//! model server (the stateful mock, conversation threads, which live server-side so any
//! instance can continue any session).
//!
//! The server comes from `CTXBRIDGE_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); the test works in its own schema, dropped at the
//! end. Without a server it prints a loud SKIPPED line and passes, unless
//! `CTXBRIDGE_TEST_PG_REQUIRED=1` (CI) makes a missing server a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ctxbridge::contract::AgentMessage;
use ctxbridge::store::StateStoreExt;
use ctxbridge::store::{PostgresOptions, PostgresStore, StateStore, StoreError, TranscriptEntry};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer, ScriptedReply};
use serde_json::{json, Value};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const SESSIONS: usize = 6;
const TURNS: usize = 6;
const INSTANCES: usize = 3;

fn url() -> String {
    std::env::var("CTXBRIDGE_TEST_PG_URL").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

/// Runs `sql` on a fresh connection, on a thread of its own; returns the first column of the
/// first row as text, if any.
fn admin(url: &str, sql: &str) -> Result<Option<String>, tokio_postgres::Error> {
    let (url, sql) = (url.to_string(), sql.to_string());
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let mut config: tokio_postgres::Config = url.parse()?;
                config.connect_timeout(Duration::from_secs(3));
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                let driver = tokio::spawn(connection);
                let result = client.simple_query(&sql).await;
                drop(client);
                let _ = driver.await;
                Ok(result?.into_iter().find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
                    _ => None,
                }))
            })
    })
    .join()
    .unwrap()
}

/// The test's schema; dropped when this goes away.
struct TestDb {
    url: String,
    schema: String,
}

impl TestDb {
    fn new(test: &str) -> Option<TestDb> {
        let url = url();
        if let Err(e) = admin(&url, "SELECT 1") {
            let shown = ctxbridge::store::redact_url(&url);
            if std::env::var("CTXBRIDGE_TEST_PG_REQUIRED").as_deref() == Ok("1") {
                panic!("{test}: PostgreSQL is required but {shown} does not answer: {e}");
            }
            eprintln!(
                "\n*** SKIPPED {test}: no PostgreSQL answers at {shown} ({e}).\n\
                 *** Start a server with a database the URL can reach, or point \
                 CTXBRIDGE_TEST_PG_URL at one.\n"
            );
            return None;
        }
        let schema = format!("ctxb_fleet_{}", uuid::Uuid::new_v4().simple());
        Some(TestDb { url, schema })
    }

    fn store(&self) -> PostgresStore {
        PostgresStore::connect(
            &self.url,
            PostgresOptions::default()
                .with_schema(self.schema.clone())
                .with_pool_size(2),
        )
        .unwrap()
    }

    fn query(&self, sql: &str) -> Option<String> {
        admin(
            &self.url,
            &format!("SET search_path = {}; {sql}", self.schema),
        )
        .unwrap()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Err(e) = admin(
            &self.url,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        ) {
            eprintln!("could not drop test schema {}: {e}", self.schema);
        }
    }
}

/// A small deterministic generator (the seed is printed, so a run can be replayed).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn turn_command(dir: &Path, session: &str, prompt: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ctxbridge"));
    command
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("CTXBRIDGE_LOG")
        .args(["turn", "--session", session, "--json", prompt]);
    command
}

/// Runs one `ctxbridge turn --json` to completion and returns its JSON object.
fn turn(dir: &Path, session: &str, prompt: &str) -> Value {
    let out = turn_command(dir, session, prompt).output().unwrap();
    assert!(
        out.status.success(),
        "turn {session}/{prompt} in {} failed: {}\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Three instance directories with the same configuration: one PostgreSQL schema, the mock
/// model over the Responses API with conversation threads, short leases.
fn instances(db: &TestDb, base_url: &str, root: &Path) -> Vec<PathBuf> {
    (0..INSTANCES)
        .map(|i| {
            let dir = root.join(format!("instance-{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let config = json!({
                "plugins": {
                    "slots": {"contextEngine": "sample-summary"},
                    "entries": {"sample-summary":
                        {"config": {"windowMessages": 100, "chunkMessages": 50}}}
                },
                "agent": {"developerInstructions": "Be brief."},
                "backend": {"kind": "responses", "baseUrl": base_url, "model": "mock-model",
                            "threads": "conversation"},
                "store": {"kind": "postgres", "url": db.url, "schema": db.schema,
                          "leaseTtlMs": 4000},
            });
            std::fs::write(
                dir.join("ctxbridge.json5"),
                serde_json::to_string_pretty(&config).unwrap(),
            )
            .unwrap();
            dir
        })
        .collect()
}

/// Interleaved turns of six sessions land on random instances of three: every session keeps
/// one conversation and is projected once (its first turn) in its one epoch, as the turns'
/// JSON and the model's recorded requests show. Then an instance is killed (SIGKILL) while its
/// request stalls at the model: after the lease expires another instance takes the session,
/// continues the same conversation, and the transcript holds every completed turn exactly once
/// and nothing of the killed one. Finally the killed instance's lease generation is used for a
/// late write through a store instance of its own (the process itself is gone, so the stale
/// write is made at the store level): it is refused as stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_sessions_and_survive_a_kill() {
    let Some(db) = TestDb::new("three_instances_share_sessions_and_survive_a_kill") else {
        return;
    };
    let mock = MockModelServer::start(MockModelConfig::stateful())
        .await
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let dirs = instances(&db, &mock.base_url(), root.path());
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("fleet seed {seed}");

    // Phase 1: one thread per session, all sessions at once, each turn on a random instance.
    let results: BTreeMap<String, Vec<(usize, Value)>> = {
        let dirs = dirs.clone();
        tokio::task::spawn_blocking(move || {
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..SESSIONS)
                    .map(|s| {
                        let dirs = &dirs;
                        scope.spawn(move || {
                            let mut rng = Lcg(seed ^ (s as u64).wrapping_mul(0x9E37_79B9));
                            let session = format!("s{s}");
                            let turns: Vec<(usize, Value)> = (0..TURNS)
                                .map(|t| {
                                    let instance = rng.below(INSTANCES);
                                    let prompt = format!("{session} turn {t}");
                                    (instance, turn(&dirs[instance], &session, &prompt))
                                })
                                .collect();
                            (session, turns)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            })
        })
        .await
        .unwrap()
    };
    let mut threads = BTreeSet::new();
    let mut instances_used = BTreeSet::new();
    for (session, turns) in &results {
        let thread = turns[0].1["threadId"].as_str().unwrap().to_string();
        assert!(thread.starts_with("conv"), "{session}: {thread}");
        for (t, (instance, out)) in turns.iter().enumerate() {
            instances_used.insert(*instance);
            assert_eq!(
                out["threadId"],
                thread.as_str(),
                "{session} turn {t}: {out}"
            );
            assert_eq!(
                out["epoch"], turns[0].1["epoch"],
                "{session} turn {t}: {out}"
            );
            let expected_action = if t == 0 { "started" } else { "resumed" };
            assert_eq!(
                out["threadAction"], expected_action,
                "{session} turn {t}: {out}"
            );
            assert_eq!(out["projected"], t == 0, "{session} turn {t}: {out}");
        }
        // The model saw the session's turns on its one conversation, each sending only the
        // turn's own prompt (no history resent: projected once).
        let requests: Vec<_> = mock
            .response_requests()
            .into_iter()
            .filter(|r| r.conversation_id.as_deref() == Some(thread.as_str()))
            .collect();
        assert_eq!(requests.len(), TURNS, "{session}");
        for (t, request) in requests.iter().enumerate() {
            let users = request.input_texts("user");
            assert_eq!(
                users.last().map(String::as_str),
                Some(format!("{session} turn {t}").as_str()),
                "{session} request {t}: {users:?}"
            );
            if t > 0 {
                assert_eq!(users.len(), 1, "{session} request {t} resent: {users:?}");
            }
        }
        assert!(threads.insert(thread), "{session} shares a thread");
    }
    assert_eq!(mock.response_requests().len(), SESSIONS * TURNS);
    assert!(
        instances_used.len() > 1,
        "seed {seed}: all turns on one instance"
    );

    // Phase 2: the model stalls the next request; the instance making it is killed.
    mock.push_reply(ScriptedReply::text("never delivered").with_delay(Duration::from_secs(600)));
    let victim_dir = dirs[0].clone();
    let mut victim = turn_command(&victim_dir, "s0", "s0 killed turn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while mock.pending_replies() > 0 {
        assert!(
            victim.try_wait().unwrap().is_none(),
            "the victim exited early"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lease_key = ctxbridge::projection::binding_key("main", Some("s0"), "s0");
    let held: u64 = db
        .query(&format!(
            "SELECT generation FROM ctxbridge_leases WHERE session = '{lease_key}'"
        ))
        .unwrap()
        .parse()
        .unwrap();
    victim.kill().unwrap();
    let status = victim.wait().unwrap();
    assert!(!status.success());

    // Another instance waits out the dead holder's lease and continues the same conversation.
    let survivor_dir = dirs[1].clone();
    let after = tokio::task::spawn_blocking(move || turn(&survivor_dir, "s0", "s0 after the kill"))
        .await
        .unwrap();
    let s0_thread = results["s0"][0].1["threadId"].as_str().unwrap();
    assert_eq!(after["threadId"], s0_thread, "{after}");
    assert_eq!(after["threadAction"], "resumed", "{after}");
    assert_eq!(after["projected"], false, "{after}");
    let last = mock.response_requests().pop().unwrap();
    assert_eq!(last.conversation_id.as_deref(), Some(s0_thread));
    assert_eq!(
        last.input_texts("user"),
        vec!["s0 after the kill".to_string()]
    );
    // The conversation (server-side) holds every turn once: nothing was replayed by the
    // takeover. (The killed turn's input reached the server before the kill, so the server
    // may keep it; the bridge's own transcript does not, below.)
    let conversation = last.conversation_texts("user");
    for t in 0..TURNS {
        let prompt = format!("s0 turn {t}");
        let seen = conversation.iter().filter(|u| u.ends_with(&prompt)).count();
        assert_eq!(seen, 1, "{prompt} in {conversation:?}");
    }
    let seen = conversation
        .iter()
        .filter(|u| *u == "s0 after the kill")
        .count();
    assert_eq!(seen, 1, "{conversation:?}");

    // Nothing lost, nothing twice, nothing of the killed turn.
    let store = db.store();
    for s in 0..SESSIONS {
        let session = format!("s{s}");
        let users: Vec<String> = store
            .load_transcript(&session)
            .unwrap()
            .into_iter()
            .map(|e| e.message)
            .filter(|m| m.role == ctxbridge::contract::Role::User)
            .map(|m| m.plain_text())
            .collect();
        let mut expected: Vec<String> = (0..TURNS).map(|t| format!("{session} turn {t}")).collect();
        if s == 0 {
            expected.push("s0 after the kill".into());
        }
        assert_eq!(users, expected, "{session}");
        assert!(
            store.pending_outbox(&session).unwrap().is_empty(),
            "{session}"
        );
    }

    // The killed instance's generation is fenced: its late turn is refused and changes nothing.
    let current: u64 = db
        .query(&format!(
            "SELECT generation FROM ctxbridge_leases WHERE session = '{lease_key}'"
        ))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        current > held,
        "no takeover: generation {current} after {held}"
    );
    let late = store.record_turn(
        "s0",
        &[TranscriptEntry {
            entry_id: "late".into(),
            message: AgentMessage::user("late write of the killed instance"),
        }],
        &lease_key,
        "{}",
        held,
    );
    assert!(
        matches!(late, Err(StoreError::StaleGeneration { held: h, .. }) if h == held),
        "{late:?}"
    );
    assert_eq!(store.load_transcript("s0").unwrap().len(), (TURNS + 1) * 2);
    mock.shutdown().await;
}
