//! Name reservations: one live object per name key, held from the start of a creation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::lock;
use crate::error::{Error, ErrorKind, Result};

/// The shared name → id map of one object kind.
pub(crate) type Names = Arc<Mutex<HashMap<String, String>>>;

/// Claims `name` for `id` in `names`, or AlreadyExists naming the holder.
pub(crate) fn claim(names: &Names, kind: &str, name: &str, id: &str) -> Result<()> {
    let mut map = lock(names);
    if let Some(holder) = map.get(name) {
        return Err(Error::new(
            ErrorKind::AlreadyExists,
            format!("{kind} name {name:?} is reserved for id {holder}"),
        ));
    }
    map.insert(name.to_string(), id.to_string());
    Ok(())
}

/// Frees `name` if `id` holds it.
pub(crate) fn release(names: &Names, name: &str, id: &str) {
    let mut map = lock(names);
    if map.get(name).is_some_and(|holder| holder == id) {
        map.remove(name);
    }
}

/// A claimed name and the id chosen for the object; released on drop unless committed.
#[derive(Debug)]
pub struct Reservation {
    names: Names,
    name: String,
    id: String,
    committed: bool,
}

impl Reservation {
    pub(crate) fn new(names: Names, name: String, id: String) -> Self {
        Reservation {
            names,
            name,
            id,
            committed: false,
        }
    }

    /// The id the object will have.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The reserved name key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keeps the name claimed past drop (the object now exists; its removal releases it).
    pub(crate) fn commit(mut self) {
        self.committed = true;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.committed {
            release(&self.names, &self.name, &self.id);
        }
    }
}
