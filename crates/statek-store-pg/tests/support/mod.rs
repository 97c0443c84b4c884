//! Shared helpers for the store's integration tests (`mod support;`).

pub mod fault_proxy;
