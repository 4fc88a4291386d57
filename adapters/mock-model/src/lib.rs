//! ctxbridge-mock-model (being built).
