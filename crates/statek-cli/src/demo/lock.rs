//! Locking what the demo's tasks share (arrivals, tick outcomes): a
//! poisoned lock only means another task panicked while holding it.

use std::sync::Mutex;

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
