//! The reservation-source conformance suite against the in-memory source
//! (no database). statek-store-pg's tests run the same suite against
//! `PgStore`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use statek_policy::WeightedFairnessPolicy;
use statek_testing::source_conformance::{self, SourceHarness};
use statek_testing::InMemoryReservations;

struct Memory(InMemoryReservations);

impl SourceHarness for Memory {
    type Source = InMemoryReservations;

    async fn new() -> Self {
        Memory(InMemoryReservations::new())
    }

    fn source(&self) -> &InMemoryReservations {
        &self.0
    }

    async fn seal(
        &self,
        sealed: &WeightedFairnessPolicy,
        successor: &WeightedFairnessPolicy,
    ) -> u64 {
        self.0.seal(sealed.shard_id(), successor.clone()).unwrap()
    }
}

#[tokio::test]
async fn the_in_memory_source_passes_the_reservation_source_suite() {
    source_conformance::exercise::<Memory>().await;
}
