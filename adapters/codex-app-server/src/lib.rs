//! codex-app-server-client (being built).
