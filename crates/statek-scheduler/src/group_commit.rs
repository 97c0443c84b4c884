//! Group commit: many callers' items written in one flush.
//!
//! A caller submits an item and waits for its own outcome. The first
//! caller to find no flush under way leads: it waits up to `linger` (or
//! until `max` items wait), takes up to `max` items, flushes them in one
//! call and hands every caller its outcome; when items wait by then, it
//! hands the lead to their callers (one of them takes over), so no caller
//! leads for longer than its own flush while items keep coming. Items
//! submitted during a flush form the next one, so under load flushes grow
//! by themselves. If a leader is dropped mid-flush, a waiting
//! caller takes over; the items of the interrupted flush get no outcome.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{oneshot, Notify};

struct State<T, O> {
    queue: Vec<(T, oneshot::Sender<O>)>,
    leading: bool,
}

/// See the module docs.
pub(crate) struct GroupCommit<T, O> {
    state: Mutex<State<T, O>>,
    max: usize,
    linger: Duration,
    /// Wakes a lingering leader when `max` items wait.
    full: Notify,
    /// Wakes waiting callers when a leader was dropped mid-flush.
    handoff: Notify,
}

/// Clears `leading` and hands over when a leader stops without finishing.
struct LeaderGuard<'a, T, O> {
    commit: &'a GroupCommit<T, O>,
    done: bool,
}

impl<T, O> Drop for LeaderGuard<'_, T, O> {
    fn drop(&mut self) {
        if !self.done {
            self.commit.lock().leading = false;
            self.commit.handoff.notify_waiters();
        }
    }
}

impl<T, O> GroupCommit<T, O> {
    /// Flushes of at most `max` items (at least 1), each waiting at most
    /// `linger` for more items to join.
    pub(crate) fn new(max: usize, linger: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                queue: Vec::new(),
                leading: false,
            }),
            max: max.max(1),
            linger,
            full: Notify::new(),
            handoff: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T, O>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Submits `item` and waits for its outcome; `flush` writes a batch and
    /// returns one outcome per item, in order (it retries by itself: a
    /// flush is never dropped). `None` only if the flush that held the
    /// item was interrupted (its leader dropped).
    pub(crate) async fn submit<F, Fut>(&self, item: T, flush: F) -> Option<O>
    where
        F: Fn(Vec<T>) -> Fut,
        Fut: Future<Output = Vec<O>>,
    {
        let (tx, mut rx) = oneshot::channel();
        // Armed before the item is queued, so no hand-over is missed.
        let mut handoff = std::pin::pin!(self.handoff.notified());
        handoff.as_mut().enable();
        let lead = {
            let mut state = self.lock();
            state.queue.push((item, tx));
            if state.queue.len() >= self.max {
                self.full.notify_one();
            }
            !std::mem::replace(&mut state.leading, true)
        };
        if lead {
            self.lead(&flush).await;
        }
        loop {
            tokio::select! {
                biased;
                outcome = &mut rx => return outcome.ok(),
                () = handoff.as_mut() => {
                    handoff.set(self.handoff.notified());
                    handoff.as_mut().enable();
                    let take_over = {
                        let mut state = self.lock();
                        !state.queue.is_empty() && !std::mem::replace(&mut state.leading, true)
                    };
                    if take_over {
                        self.lead(&flush).await;
                    }
                }
            }
        }
    }

    async fn lead<F, Fut>(&self, flush: &F)
    where
        F: Fn(Vec<T>) -> Fut,
        Fut: Future<Output = Vec<O>>,
    {
        let mut guard = LeaderGuard {
            commit: self,
            done: false,
        };
        loop {
            let waiting = self.lock().queue.len();
            if waiting < self.max && !self.linger.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(self.linger) => {}
                    () = self.full.notified() => {}
                }
            }
            let batch: Vec<(T, oneshot::Sender<O>)> = {
                let mut state = self.lock();
                let n = state.queue.len().min(self.max);
                state.queue.drain(..n).collect()
            };
            if !batch.is_empty() {
                let (items, senders): (Vec<T>, Vec<oneshot::Sender<O>>) = batch.into_iter().unzip();
                let outcomes = flush(items).await;
                for (sender, outcome) in senders.into_iter().zip(outcomes) {
                    let _ = sender.send(outcome);
                }
            }
            let mut state = self.lock();
            if state.queue.is_empty() {
                state.leading = false;
                guard.done = true;
                return;
            }
            // Items wait: hand the lead to their callers (one takes over)
            // rather than keep it, so this caller, whose item may have
            // gone out, is not held leading for as long as items keep
            // coming. Keep it only when no caller of theirs is left to
            // take over.
            if state.queue.iter().any(|(_, sender)| !sender.is_closed()) {
                state.leading = false;
                guard.done = true;
                drop(state);
                self.handoff.notify_waiters();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn concurrent_items_share_flushes_and_each_gets_its_outcome() {
        let commit = Arc::new(GroupCommit::<u32, u32>::new(8, Duration::from_millis(20)));
        let flushes = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for item in 0..20u32 {
            let (commit, flushes) = (Arc::clone(&commit), Arc::clone(&flushes));
            tasks.push(tokio::spawn(async move {
                commit
                    .submit(item, |items: Vec<u32>| {
                        let flushes = Arc::clone(&flushes);
                        async move {
                            flushes.lock().unwrap().push(items.len());
                            items.iter().map(|i| i * 10).collect()
                        }
                    })
                    .await
            }));
        }
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        let expected: Vec<Option<u32>> = (0..20).map(|i| Some(i * 10)).collect();
        assert_eq!(outcomes, expected);
        let sizes = flushes.lock().unwrap().clone();
        // 20 items submitted at once, at most 8 per flush: 8, 8, 4.
        assert_eq!(sizes, [8, 8, 4]);
    }

    #[tokio::test]
    async fn a_lone_item_is_flushed_after_the_linger() {
        let commit = GroupCommit::<u32, u32>::new(8, Duration::from_millis(5));
        let calls = AtomicUsize::new(0);
        let outcome = commit
            .submit(7, |items: Vec<u32>| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move { items }
            })
            .await;
        assert_eq!((outcome, calls.load(Ordering::SeqCst)), (Some(7), 1));
    }

    #[tokio::test]
    async fn a_dropped_leader_hands_over_to_a_waiting_caller() {
        let commit = Arc::new(GroupCommit::<u32, u32>::new(1, Duration::ZERO));
        let release = Arc::new(Notify::new());
        // The leader's flush never finishes until it is aborted.
        let leader = tokio::spawn({
            let commit = Arc::clone(&commit);
            async move {
                commit
                    .submit(1, |_items: Vec<u32>| async {
                        std::future::pending::<()>().await;
                        Vec::new()
                    })
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let follower = tokio::spawn({
            let (commit, release) = (Arc::clone(&commit), Arc::clone(&release));
            async move {
                release.notify_one();
                commit
                    .submit(2, |items: Vec<u32>| async move { items })
                    .await
            }
        });
        release.notified().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        leader.abort();
        assert!(leader.await.unwrap_err().is_cancelled());
        let outcome = tokio::time::timeout(Duration::from_secs(5), follower)
            .await
            .expect("the follower took over")
            .unwrap();
        assert_eq!(outcome, Some(2));
    }

    #[tokio::test]
    async fn the_leader_gets_its_outcome_while_others_keep_submitting() {
        // Each flush brings one more item (a run finishing while the
        // previous write is under way), 50 times. The first caller's item
        // is in the first flush: it must have its outcome then, not only
        // once the queue happens to be empty.
        let commit = Arc::new(GroupCommit::<u32, u32>::new(8, Duration::ZERO));
        let spawned = Arc::new(AtomicUsize::new(0));
        let followers = Arc::new(Mutex::new(Vec::new()));
        let flush = {
            let (commit, spawned, followers) = (
                Arc::clone(&commit),
                Arc::clone(&spawned),
                Arc::clone(&followers),
            );
            move |items: Vec<u32>| {
                let (commit, spawned, followers) = (
                    Arc::clone(&commit),
                    Arc::clone(&spawned),
                    Arc::clone(&followers),
                );
                async move {
                    if spawned.fetch_add(1, Ordering::SeqCst) < 50 {
                        let (queued_tx, queued_rx) = oneshot::channel();
                        let follower = tokio::spawn(async move {
                            let mut submit = std::pin::pin!(
                                commit.submit(1, |items: Vec<u32>| async move { items })
                            );
                            // Queued at its first poll.
                            let first = std::future::poll_fn(|cx| {
                                std::task::Poll::Ready(submit.as_mut().poll(cx))
                            })
                            .await;
                            let _ = queued_tx.send(());
                            match first {
                                std::task::Poll::Ready(outcome) => outcome,
                                std::task::Poll::Pending => submit.await,
                            }
                        });
                        followers.lock().unwrap().push(follower);
                        let _ = queued_rx.await;
                    }
                    items
                }
            }
        };
        let outcome = tokio::time::timeout(Duration::from_secs(10), commit.submit(0, &flush))
            .await
            .expect("the leader's submit returned");
        // Its own item went out in the first flush; the leader must not
        // keep leading the 50 flushes after it.
        let flushes_before_return = spawned.load(Ordering::SeqCst);
        assert_eq!((outcome, flushes_before_return), (Some(0), 1));
        let followers: Vec<_> = std::mem::take(&mut *followers.lock().unwrap());
        for follower in followers {
            assert_eq!(follower.await.unwrap(), Some(1));
        }
    }
}
