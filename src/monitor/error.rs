//! The monitor's error: one message with the steps that led to it, outermost first.

use std::fmt;

/// A monitor failure such as `runc create: container id exists`; context is prepended.
#[derive(Debug)]
pub struct Error(String);

impl Error {
    /// An error with just this message.
    pub fn msg(message: impl Into<String>) -> Self {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The monitor's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Adds the step that failed in front of an error (`open log file /x: No such file …`).
pub trait Context<T> {
    /// Prefixes the error with `step: `.
    fn context(self, step: &str) -> Result<T>;
    /// Prefixes the error with a step computed only on failure.
    fn with_context(self, step: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, step: &str) -> Result<T> {
        self.map_err(|e| Error(format!("{step}: {e}")))
    }

    fn with_context(self, step: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error(format!("{}: {e}", step())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_prepended_outermost_first() {
        let inner: Result<()> = Err(Error::msg("no such file"));
        let outer = inner.context("read pid file").context("runc create");
        assert_eq!(
            outer.expect_err("must fail").to_string(),
            "runc create: read pid file: no such file"
        );
    }
}
