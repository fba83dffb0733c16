//! A full disk (issue 28 item 4): refusals on a full root, logs and records on a full disk:
//! `disk::` trials.

mod full;
mod records;

trials! {
    full,
    records,
}
