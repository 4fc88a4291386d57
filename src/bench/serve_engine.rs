//! `ctxbridge bench --serve`, the engine-session row: what the served path adds to a turn the
//! harness runs. The same harness turn (default configuration: the `legacy` engine, a SQLite
//! store file of its own) two ways, interleaved, on the same Codex binary and configuration:
//!
//! - **direct**: `Harness::turn` on the one Codex backend with an app-server child of its own
//!   (what `ctxbridge turn` runs, without the process start);
//! - **served**: a WebSocket client's `turn/start` through `serve` with engine sessions — route,
//!   engine session, harness, the same Codex backend over the shared upstream, the hub — timed
//!   until its `turn/completed` (which the client hears once the turn is recorded).
//!
//! The difference of the two p50s is what `serve` costs an engine turn.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use codex_app_server_client::{AppServerClient, AppServerConfig, AppServerError, TurnLimits};

use crate::backend::codex::{CodexBackend, Connect};
use crate::bench::peer::Peer;
use crate::bench::serve::{Latency, WARMUP_TURNS};
use crate::bench::{harness_err, BenchError};
use crate::config::Config;
use crate::harness::{Harness, TurnSpec};
use crate::serve::{self as proxy, EngineSessions, HubConnect, ListenAddr, ServeOptions};
use crate::store::{SqliteStore, StateStore};

/// The direct path's connection: an app-server child of the backend's own.
#[derive(Debug)]
struct OwnChild(AppServerConfig);

#[async_trait]
impl Connect for OwnChild {
    async fn connect(&self) -> Result<AppServerClient, AppServerError> {
        AppServerClient::spawn(self.0.clone()).await
    }
}

fn store_in(dir: &Path) -> Result<Arc<dyn StateStore>, BenchError> {
    let store =
        SqliteStore::open(dir.join("state.sqlite")).map_err(|source| BenchError::Store {
            operation: "open the bench store",
            source,
        })?;
    Ok(Arc::new(store))
}

fn runtime(operation: &'static str) -> impl FnOnce(String) -> BenchError {
    move |message| BenchError::Runtime { operation, message }
}

/// `serve` in this process in front of `upstream`, its client threads served by the harness
/// (as `ctxbridge serve` builds it with engine threads on), on a loopback port.
async fn serve_with_engine(
    upstream: AppServerConfig,
    dir: &Path,
) -> Result<(proxy::ServeHandle, String), BenchError> {
    let listen =
        ListenAddr::parse("ws://127.0.0.1:0").map_err(|e| runtime("serve")(e.to_string()))?;
    let mut options = ServeOptions::new(listen, upstream);
    let store = store_in(dir)?;
    let backend = Arc::new(CodexBackend::over(
        Arc::new(HubConnect::new(
            options.upstream_handle(),
            TurnLimits::default(),
        )),
        "the Codex app-server behind ctxbridge serve",
    ));
    let app =
        crate::app::open_with_backend(&Config::default(), store.clone(), backend.clone()).await;
    options.sessions = Arc::new(EngineSessions::new(Arc::new(app.harness), backend));
    options.store = Some(store);
    let handle = proxy::start(options)
        .await
        .map_err(|e| runtime("start serve")(crate::util::error_chain(&e)))?;
    let addr = handle
        .local_addr
        .ok_or_else(|| runtime("start serve")("no address".into()))?;
    Ok((handle, format!("ws://{addr}")))
}

/// The direct path's harness: the default configuration on a Codex backend with its own
/// child of `upstream`'s binary and configuration.
async fn direct_harness(upstream: AppServerConfig, dir: &Path) -> Result<Harness, BenchError> {
    let backend = Arc::new(CodexBackend::over(
        Arc::new(OwnChild(upstream)),
        "the Codex app-server",
    ));
    let app = crate::app::open_with_backend(&Config::default(), store_in(dir)?, backend).await;
    Ok(app.harness)
}

/// Warm-up turns on both paths, then `turns` timed harness turns on each, interleaved (the
/// order alternating every round). `direct` and `served` are two homes of the same app-server
/// configuration. Returns (direct, served).
pub(crate) async fn engine_turns_interleaved(
    direct: AppServerConfig,
    served: AppServerConfig,
    dir: &Path,
    turns: usize,
) -> Result<(Latency, Latency), BenchError> {
    let direct_dir = dir.join("engine-direct");
    let served_dir = dir.join("engine-served");
    for path in [&direct_dir, &served_dir] {
        std::fs::create_dir_all(path).map_err(|source| BenchError::Io {
            operation: "create a directory",
            path: path.clone(),
            source,
        })?;
    }
    let harness = direct_harness(direct, &direct_dir).await?;
    let (handle, url) = serve_with_engine(served, &served_dir).await?;
    let mut client = Peer::ws(&url).await?;
    client.initialize().await?;
    let thread = client.start_thread().await?;
    let session = "bench-engine-direct";
    let direct_turn = |text: String| {
        let harness = &harness;
        async move {
            let started = std::time::Instant::now();
            harness
                .turn(TurnSpec::new(session, text))
                .await
                .map_err(harness_err("a direct engine turn"))?;
            Ok::<_, BenchError>(started.elapsed())
        }
    };
    for i in 0..WARMUP_TURNS {
        direct_turn(format!("warm up {i}")).await?;
        client
            .turn(2 + i as u64, &thread, &format!("warm up {i}"))
            .await?;
    }
    let (mut d, mut s) = (Vec::with_capacity(turns), Vec::with_capacity(turns));
    for i in 0..turns {
        let id = 10 + i as u64;
        let text = format!("ping {i}");
        if i % 2 == 0 {
            d.push(direct_turn(text.clone()).await?);
            s.push(client.turn(id, &thread, &text).await?.elapsed);
        } else {
            s.push(client.turn(id, &thread, &text).await?.elapsed);
            d.push(direct_turn(text).await?);
        }
    }
    drop(client);
    handle.shutdown().await;
    Ok((Latency::of(d), Latency::of(s)))
}
