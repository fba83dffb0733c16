//! The `bosun` client commands themselves, from the built binary: `cli::` trials.

mod errors;

trials! {
    errors,
}
