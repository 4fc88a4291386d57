//! responses-client (being built).
