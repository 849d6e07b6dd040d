//! The services this process offers for a file on its owner socket (see
//! [`crate::remote::service`]): named handlers a layer above the engine registers. Kept apart
//! from the socket so the file's core can hold them without depending on the wire format.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// What a service answers: its reply bytes, or a message for the caller.
pub type ServiceFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send>>;

/// A service handler: request bytes in, reply bytes out (formats are the service's own).
pub type ServiceFn = Arc<dyn Fn(Vec<u8>) -> ServiceFuture + Send + Sync>;

/// The services registered in this process for one file (served while it owns the file).
#[derive(Default)]
pub(crate) struct Services(Mutex<HashMap<String, ServiceFn>>);

impl Services {
    pub(crate) fn set(&self, name: &str, f: ServiceFn) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), f);
    }

    pub(crate) fn get(&self, name: &str) -> Option<ServiceFn> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
}
