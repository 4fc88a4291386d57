//! An error and its sources on one line, for messages to clients, the CLI and logs.

use std::error::Error;

/// `error`'s message followed by each source's, joined by `": "`. A source whose message the
/// text already holds (an error that prints its source itself) is not repeated.
pub fn error_chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    #[error("opening the store")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("opening the store: {0}")]
    struct Echoing(#[source] std::io::Error);

    #[test]
    fn joins_sources_once() {
        let io = || std::io::Error::other("disk full");
        assert_eq!(error_chain(&Outer(io())), "opening the store: disk full");
        assert_eq!(error_chain(&Echoing(io())), "opening the store: disk full");
    }
}
