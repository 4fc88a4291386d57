//! Shared by the `serve_proxy*` tests: `ctxbridge serve` on an ephemeral loopback port in front
//! of the real `codex app-server` (offline, mock model) or of an upstream that never starts,
//! plain HTTP `GET`s, and a process check.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use codex_app_server_client::{locate_codex_binary, offline_overrides, AppServerConfig};
use ctxbridge::serve::{self, ListenAddr, ServeHandle, ServeOptions};
use ctxbridge::store::{SqliteStore, StateStore};
use ctxbridge_mock_model::{MockModelConfig, MockModelServer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A generous bound so a broken proxy fails the test instead of hanging it.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub struct Env {
    pub handle: ServeHandle,
    pub mock: Option<MockModelServer>,
    pub store: Arc<SqliteStore>,
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn url(&self) -> String {
        format!("ws://{}", self.handle.local_addr.unwrap())
    }
    pub fn pid_file(&self) -> PathBuf {
        self.dir.path().join("upstream.pid")
    }
}

/// The upstream command: a shell that records its pid, then becomes `codex app-server`.
pub fn upstream(binary: &Path, dir: &Path, base_url: &str) -> AppServerConfig {
    let script = format!(
        "echo $$ > '{}'; exec '{}' app-server \"$@\"",
        dir.join("upstream.pid").display(),
        binary.display()
    );
    AppServerConfig::new(dir.join("codex-home"))
        .with_command(["sh".to_owned(), "-c".to_owned(), script, "sh".to_owned()])
        .with_overrides(offline_overrides(base_url))
        .with_cwd(dir)
}

/// Serve on an ephemeral loopback port in front of the real Codex (None: Codex missing).
pub async fn with_codex(tweak: impl FnOnce(&mut ServeOptions)) -> Option<Env> {
    let Some(binary) = locate_codex_binary() else {
        eprintln!("\n!!!!!!!! SKIPPED serve_proxy: no codex binary (run `npm ci` at the repo root or set CODEX_BIN) !!!!!!!!\n");
        return None;
    };
    let mock = MockModelServer::start(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap());
    let mut options = ServeOptions::new(
        ListenAddr::parse("ws://127.0.0.1:0").unwrap(),
        upstream(&binary, dir.path(), &mock.base_url()),
    );
    options.store = Some(store.clone() as Arc<dyn StateStore>);
    tweak(&mut options);
    let handle = serve::start(options).await.unwrap();
    Some(Env {
        handle,
        mock: Some(mock),
        store,
        dir,
    })
}

/// Serve with an upstream that is never started (transport-level behaviour only).
pub async fn without_codex(tweak: impl FnOnce(&mut ServeOptions)) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("state.db")).unwrap());
    let mut options = ServeOptions::new(
        ListenAddr::parse("ws://127.0.0.1:0").unwrap(),
        AppServerConfig::new(dir.path().join("codex-home")).with_command(["false"]),
    );
    tweak(&mut options);
    let handle = serve::start(options).await.unwrap();
    Env {
        handle,
        mock: None,
        store,
        dir,
    }
}

/// A plain HTTP `GET` (optionally with an `Authorization` header): status line and body.
pub async fn http_get(
    addr: std::net::SocketAddr,
    path: &str,
    authorization: Option<&str>,
) -> (String, String) {
    http_get_over(TcpStream::connect(addr).await.unwrap(), path, authorization).await
}

/// `GET path` over an open connection: the status line and the body.
pub async fn http_get_over(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    path: &str,
    authorization: Option<&str>,
) -> (String, String) {
    let auth = authorization.map_or(String::new(), |v| format!("Authorization: {v}\r\n"));
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

pub fn pid_alive(pid: &str) -> bool {
    std::process::Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}
