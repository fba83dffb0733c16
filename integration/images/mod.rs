//! ImageService over the socket: pulls (tag, digest, index, auth, mirror), import,
//! list/status/remove, errors, crashes: `images::` trials.

mod failures;
mod flaky;
mod pull;
mod store;

trials! {
    pull,
    store,
    failures,
    flaky,
}
