//! A reserved batch of slots handed to an executor, and the bounded pool of
//! execution permits its runs take.
//!
//! The statek-scheduler's `Worker` reserves slots in batches (one range row per
//! batch) and hands each batch to [`crate::TenantExecutor::execute_batch`] as a
//! [`SlotBatch`]: the slots in sequence order, each mapped to its tenant,
//! and the Worker's [`RunPool`]. An executor claims for the slots in
//! sequence order, at most as many runs as it holds permits, so a claimed
//! run never waits for a permit; a slot whose claim must wait for a permit
//! waits *before* its claim. Every slot gets exactly one outcome through
//! [`SlotBatch::report`], whatever happens: a slot is consumed, never
//! passed on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::stream::{FuturesUnordered, StreamExt};
use statek_policy::{SchedulerShardId, TenantId};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::outcome::TenantTickOutcome;
use crate::slot::{SlotClass, SlotOutcomes};

/// One reserved slot of a batch: its global sequence and the tenant the
/// policy's cycle maps it to (`slot = sequence mod L`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSlot {
    /// The slot's global sequence in its shard.
    pub sequence: u64,
    /// The tenant the slot belongs to; only its runs may use the slot.
    pub tenant: TenantId,
}

/// The bounded pool of executing runs of one replica: at most
/// [`capacity`](Self::capacity) runs execute at once. Waiters are served
/// first come, first served (a FIFO semaphore), so slots get their permits
/// in the order they asked.
#[derive(Debug, Clone)]
pub struct RunPool {
    semaphore: Arc<Semaphore>,
    capacity: usize,
}

impl RunPool {
    /// A pool of `capacity` permits (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            semaphore: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// Permits in the pool.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Permits free right now.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Waits for one permit (first come, first served).
    pub async fn acquire(&self) -> RunPermit {
        // The semaphore is never closed.
        match Arc::clone(&self.semaphore).acquire_owned().await {
            Ok(permit) => RunPermit(Some(permit)),
            Err(_) => RunPermit(None),
        }
    }

    /// Up to `wanted` more permits, without waiting.
    fn try_take(&self, wanted: usize, into: &mut Vec<RunPermit>) {
        while into.len() < wanted {
            match Arc::clone(&self.semaphore).try_acquire_owned() {
                Ok(permit) => into.push(RunPermit(Some(permit))),
                Err(_) => break,
            }
        }
    }
}

/// The right to execute one run; dropping it returns it to its pool.
#[derive(Debug)]
pub struct RunPermit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

/// A reserved batch given to [`crate::TenantExecutor::execute_batch`].
///
/// Protocol for an implementation:
/// 1. take permits with [`permits`](Self::permits) (waits for at least
///    one; `None` once the replica is stopping);
/// 2. claim for the next slots in sequence order, at most one run per
///    permit (each slot only from its own tenant), and call
///    [`decided`](Self::decided) with the number of slots decided so far;
/// 3. start each claimed run at once with its own permit, return unused
///    permits (drop them), and go on with the undecided slots;
/// 4. report every slot's outcome exactly once with
///    [`report`](Self::report) (an idle or contended slot at once, a run
///    when it finished); slots not decided when
///    [`permits`](Self::permits) returns `None` are reported
///    [`TenantTickOutcome::Cancelled`].
///
/// Handlers see [`cancel`](Self::cancel), which fires only when the
/// replica's shutdown grace has run out.
pub struct SlotBatch<'a, E> {
    shard: &'a SchedulerShardId,
    slots: &'a [BatchSlot],
    pool: &'a RunPool,
    stop: &'a CancellationToken,
    cancel: &'a CancellationToken,
    sink: &'a (dyn Fn(usize, SlotResult<E>) + Send + Sync),
    decided: AtomicUsize,
    on_decided: &'a (dyn Fn(usize) + Send + Sync),
    /// Each slot's recorded class, once known (`None`: not yet).
    classes: Mutex<Vec<Option<SlotClass>>>,
    /// Whether some slot's class cannot be known for sure (a claim whose
    /// answer was lost, a slot abandoned or reported with an error or as
    /// cancelled without a class): the range is then left unrecorded.
    uncertain: std::sync::atomic::AtomicBool,
}

impl<'a, E> SlotBatch<'a, E> {
    /// A batch of `slots` (sequence order) of `shard`, whose runs take
    /// permits of `pool`.
    /// `stop` ends claiming, `cancel` is the handlers' token; `sink` gets
    /// each slot's outcome by index, `on_decided` the decided count each
    /// time it grows.
    ///
    /// For a scheduler that drives executors (statek-scheduler's runner);
    /// an executor only receives batches.
    pub fn new(
        shard: &'a SchedulerShardId,
        slots: &'a [BatchSlot],
        pool: &'a RunPool,
        stop: &'a CancellationToken,
        cancel: &'a CancellationToken,
        sink: &'a (dyn Fn(usize, SlotResult<E>) + Send + Sync),
        on_decided: &'a (dyn Fn(usize) + Send + Sync),
    ) -> Self {
        Self {
            shard,
            slots,
            pool,
            stop,
            cancel,
            sink,
            decided: AtomicUsize::new(0),
            on_decided,
            classes: Mutex::new(vec![None; slots.len()]),
            uncertain: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The shard the slots were reserved on.
    pub fn shard(&self) -> &SchedulerShardId {
        self.shard
    }

    /// The slots, in sequence order.
    pub fn slots(&self) -> &[BatchSlot] {
        self.slots
    }

    /// Whether the replica is stopping: claim nothing more.
    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The token running handlers must watch (fires after the shutdown
    /// grace, or on a lost lease of the executor's own making).
    pub fn cancel(&self) -> &CancellationToken {
        self.cancel
    }

    /// Waits for at least one free permit and takes up to `wanted` (at
    /// least 1); `None` when the replica stops first.
    pub async fn permits(&self, wanted: usize) -> Option<Vec<RunPermit>> {
        let wanted = wanted.max(1);
        if self.stop.is_cancelled() {
            return None;
        }
        let mut held = Vec::with_capacity(wanted);
        let permit = tokio::select! {
            biased;
            _ = self.stop.cancelled() => return None,
            permit = self.pool.acquire() => permit,
        };
        held.push(permit);
        self.pool.try_take(wanted, &mut held);
        Some(held)
    }

    /// Records that the first `count` slots are decided (claimed, idle or
    /// contended; a decided slot is never claimed for again).
    pub fn decided(&self, count: usize) {
        let count = count.min(self.slots.len());
        if self.decided.fetch_max(count, Ordering::AcqRel) < count {
            (self.on_decided)(count);
        }
    }

    /// Sets the class slot `index` is recorded with
    /// ([`crate::ReservationSource::record_slot_outcomes`]) where its
    /// outcome alone does not tell it: [`SlotClass::Claimed`] as soon as a
    /// run is claimed for it (whatever the run's outcome), and
    /// [`SlotClass::IdleKnown`] for a slot decided idle without asking.
    /// The first class set for a slot stays; [`report`](Self::report)
    /// sets the outcome's own class for a slot that has none yet.
    pub fn classify(&self, index: usize, class: SlotClass) {
        if let Some(place) = lock(&self.classes).get_mut(index) {
            place.get_or_insert(class);
        }
    }

    /// Reports the outcome of slot `index` (its position in
    /// [`slots`](Self::slots)); call it exactly once per slot.
    pub fn report(&self, index: usize, outcome: Result<TenantTickOutcome, E>) {
        match &outcome {
            // A run may have been claimed for it before it was cancelled:
            // only a class set before says.
            Ok(TenantTickOutcome::Cancelled) => {
                if lock(&self.classes).get(index).is_some_and(Option::is_none) {
                    self.mark_uncertain();
                }
            }
            Ok(outcome) => self.classify(index, outcome.slot_class()),
            Err(_) => {}
        }
        (self.sink)(index, SlotResult::Outcome(outcome));
        self.decided(index + 1);
    }

    /// Marks the batch's classes unknowable: its range is left
    /// unrecorded rather than recorded wrong.
    fn mark_uncertain(&self) {
        self.uncertain.store(true, Ordering::Release);
    }

    /// The recorded class of every slot, in sequence order, or `None`
    /// when some slot's class is not known for sure (see `uncertain`):
    /// the range is left unrecorded.
    pub fn outcomes(&self) -> Option<SlotOutcomes> {
        if self.uncertain.load(Ordering::Acquire) {
            return None;
        }
        let classes = lock(&self.classes);
        if classes.iter().any(Option::is_none) {
            return None;
        }
        Some(classes.iter().flatten().copied().collect())
    }

    /// Reports every slot from `from` on as failed because claiming for
    /// them failed for good (`reason`: the error, e.g. the store's): the
    /// slots are consumed with an executor error each, never passed on.
    pub fn abandon_from(&self, from: usize, reason: &str) {
        self.mark_uncertain();
        for index in from..self.slots.len() {
            (self.sink)(index, SlotResult::Abandoned(reason.to_owned()));
            self.decided(index + 1);
        }
    }

    /// Reports every slot from `from` on as consumed unused
    /// ([`TenantTickOutcome::Cancelled`]): what a stopping executor does
    /// with the slots it will not claim for.
    pub fn cancel_from(&self, from: usize) {
        for index in from..self.slots.len() {
            self.classify(index, SlotClass::Unused);
            self.report(index, Ok(TenantTickOutcome::Cancelled));
        }
    }
}

/// What a slot of a batch ended with, as the batch's sink sees it.
pub enum SlotResult<E> {
    /// The executor's outcome or error for the slot.
    Outcome(Result<TenantTickOutcome, E>),
    /// Claiming for the slot failed for good (the error's text).
    Abandoned(String),
}

/// What a batch claim found for one slot: a run to start (with a permit),
/// or an outcome without a run.
pub enum SlotStart<C> {
    /// A run was claimed; start it at once (recorded
    /// [`SlotClass::Claimed`]).
    Claimed(C),
    /// Idle, contended or limited: the slot is consumed without a run,
    /// recorded with the outcome's own class.
    Done(TenantTickOutcome),
    /// Consumed without a run, but recorded as `SlotClass` rather than the
    /// outcome's own class: a slot decided idle without asking
    /// ([`SlotClass::IdleKnown`]), or a recovered claim whose lease was
    /// lost meanwhile (its run is another claimer's now, the slot still
    /// claimed it: [`SlotClass::Claimed`]).
    DoneAs(TenantTickOutcome, SlotClass),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Attempts of a batch claim that fails transiently, and the first pause.
const CLAIM_ATTEMPTS: u32 = 3;
const CLAIM_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The batch protocol of [`SlotBatch`] for an executor that can claim for
/// many slots at once: take the free permits, `claim` for the undecided
/// slots (at most one run per permit; it answers the decided prefix, at
/// least one slot), start every claimed run at once through `run` with its
/// permit (`run` drops it when the run's handler has finished, before its
/// outcome is recorded), give unused permits back, and go
/// on until every slot is decided; runs already started keep executing
/// while a later claim of the batch (or its retry pause) is under way. A
/// claim that fails transiently is retried (3 attempts, 50 ms doubling)
/// for the same slots with the same permits, so that an executor can send
/// the same claim again (the PostgreSQL executor then recovers what a
/// claim whose acknowledgement was lost had claimed, by its tokens); one
/// that fails for good abandons the rest of the batch
/// ([`SlotBatch::abandon_from`]).
pub async fn claim_and_run<E, C, CF, CFut, RF, RFut>(
    batch: &SlotBatch<'_, E>,
    is_retryable: fn(&E) -> bool,
    claim: CF,
    run: RF,
) where
    E: std::fmt::Display,
    CF: Fn(&[BatchSlot], usize) -> CFut,
    CFut: std::future::Future<Output = Result<Vec<SlotStart<C>>, E>>,
    RF: Fn(C, Option<RunPermit>) -> RFut,
    RFut: std::future::Future<Output = Result<TenantTickOutcome, E>>,
{
    let slots = batch.slots();
    let mut running = FuturesUnordered::new();
    let mut next = 0;
    let mut failures = 0;
    // The permits of a claim that failed transiently, kept for its retry:
    // the retry claims for the same slots with as many permits, so that
    // the runs an earlier attempt claimed (recovered by the retry) each
    // have one.
    let mut kept: Option<Vec<RunPermit>> = None;
    while next < slots.len() {
        let permits = match kept.take() {
            Some(permits) if !batch.is_stopping() => Some(permits),
            Some(_) => None,
            None => tokio::select! {
                biased;
                Some(()) = running.next(), if !running.is_empty() => continue,
                permits = batch.permits(slots.len() - next) => permits,
            },
        };
        let Some(mut permits) = permits else {
            break;
        };
        // The runs already started keep executing while the claim is under
        // way (a slow statement, a lock wait): none waits for a claim.
        let claimed = {
            let claiming = claim(&slots[next..], permits.len());
            tokio::pin!(claiming);
            loop {
                tokio::select! {
                    biased;
                    claimed = &mut claiming => break claimed,
                    Some(()) = running.next(), if !running.is_empty() => {}
                }
            }
        };
        let decided = match claimed {
            Ok(decided) if !decided.is_empty() && decided.len() <= slots.len() - next => decided,
            Ok(decided) => {
                batch.abandon_from(
                    next,
                    &format!(
                        "the batch claim answered {} of {} slots",
                        decided.len(),
                        slots.len() - next
                    ),
                );
                next = slots.len();
                break;
            }
            Err(e) if is_retryable(&e) && failures + 1 < CLAIM_ATTEMPTS => {
                // Its answer is lost; the attempt may still be running on
                // the server and claim after the retry answered.
                batch.mark_uncertain();
                tracing::warn!(error = %e, retry = failures + 1, "batch claim failed transiently; retrying");
                kept = Some(permits);
                let pause = CLAIM_PAUSE * 2u32.pow(failures);
                failures += 1;
                let pausing = tokio::time::sleep(pause);
                tokio::pin!(pausing);
                loop {
                    tokio::select! {
                        biased;
                        () = batch.stop.cancelled() => break,
                        () = &mut pausing => break,
                        Some(()) = running.next(), if !running.is_empty() => {}
                    }
                }
                continue;
            }
            Err(e) => {
                batch.abandon_from(next, &e.to_string());
                next = slots.len();
                break;
            }
        };
        failures = 0;
        let base = next;
        for (offset, start) in decided.into_iter().enumerate() {
            let index = base + offset;
            match start {
                SlotStart::Done(outcome) => batch.report(index, Ok(outcome)),
                SlotStart::DoneAs(outcome, class) => {
                    batch.classify(index, class);
                    batch.report(index, Ok(outcome));
                }
                SlotStart::Claimed(claimed) => {
                    batch.classify(index, SlotClass::Claimed);
                    let started = run(claimed, permits.pop());
                    running.push(async move {
                        let outcome = started.await;
                        batch.report(index, outcome);
                    });
                }
            }
            next = index + 1;
        }
        batch.decided(next);
        drop(permits);
    }
    batch.cancel_from(next);
    while running.next().await.is_some() {}
}
