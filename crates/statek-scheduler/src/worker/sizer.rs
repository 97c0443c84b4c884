//! [`BatchSizer`]: how large the [`crate::Worker`]'s next reservation
//! batch is.

/// Sizes reservation batches from what the Worker observes: a batch is as
/// large as the free permits plus an eighth of the busy ones, divided by
/// the fraction of recent slots that claimed a run (an exponentially
/// weighted mean over batches, weight 1/2), so its expected claims fill
/// the free permits and, when runs hold permits longer than a batch takes,
/// a few more slots wait for the next permits to free (each claimed by the
/// batch at once, without a reservation in between); 1..=`max` slots.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BatchSizer {
    max: u32,
    claimed_fraction: f64,
}

impl BatchSizer {
    pub(crate) fn new(max: u32) -> Self {
        Self {
            max: max.max(1),
            claimed_fraction: 1.0,
        }
    }

    /// The next batch's size for `free` free permits of a pool of
    /// `capacity`.
    pub(crate) fn next(&self, free: usize, capacity: usize) -> u32 {
        let free = free.max(1);
        let expected = free + capacity.saturating_sub(free) / 8;
        let wanted = (expected as f64 / self.claimed_fraction).ceil();
        if wanted >= f64::from(self.max) {
            self.max
        } else {
            // 1 <= wanted < max <= u32::MAX
            (wanted as u32).max(1)
        }
    }

    /// A batch of `slots` slots claimed `claimed` runs.
    pub(crate) fn observe(&mut self, slots: usize, claimed: usize) {
        if slots == 0 {
            return;
        }
        let fraction = claimed.min(slots) as f64 / slots as f64;
        let floor = 1.0 / f64::from(self.max);
        self.claimed_fraction = (self.claimed_fraction + fraction) / 2.0;
        if self.claimed_fraction < floor {
            self.claimed_fraction = floor;
        }
    }

    /// Forget the history (after an idle backoff: the next work is new).
    pub(crate) fn reset(&mut self) {
        self.claimed_fraction = 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_sized_so_expected_claims_fill_the_free_permits() {
        let mut sizer = BatchSizer::new(1024);
        // No history: one slot per free permit, and an eighth of the busy
        // ones.
        assert_eq!(sizer.next(16, 16), 16);
        assert_eq!(sizer.next(4, 4), 4);
        assert_eq!(sizer.next(0, 1), 1);
        assert_eq!(sizer.next(1, 64), 8);
        assert_eq!(sizer.next(8, 24), 10);
        // Every slot claimed: unchanged.
        sizer.observe(16, 16);
        assert_eq!(sizer.next(16, 16), 16);
        // A fifth claimed (the demo's noisy neighbour): fraction (1 + 0.2)
        // / 2 = 0.6, then (0.6 + 0.2) / 2 = 0.4.
        sizer.observe(80, 16);
        assert_eq!(sizer.next(16, 16), 27); // ceil(16 / 0.6)
        sizer.observe(40, 8);
        assert_eq!(sizer.next(16, 16), 40); // ceil(16 / 0.4)
                                            // Nothing claimed, repeatedly: up to the cap, never beyond.
        for _ in 0..20 {
            sizer.observe(1024, 0);
        }
        assert_eq!(sizer.next(1, 1), 1024);
        assert_eq!(sizer.next(16, 16), 1024);
        sizer.reset();
        assert_eq!(sizer.next(3, 4), 3);
        // A small cap holds.
        let capped = BatchSizer::new(8);
        assert_eq!(capped.next(100, 100), 8);
        assert_eq!(BatchSizer::new(0).next(5, 5), 1);
    }
}
