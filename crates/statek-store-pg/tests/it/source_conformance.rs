//! statek-testing's reservation-source conformance suite against
//! `PgStore`, one fresh database per case (the in-memory source passes
//! the same suite in statek-testing's own tests).

#![allow(clippy::unwrap_used)]

use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::PgStore;
use statek_testing::source_conformance::{self, SourceHarness};

struct Pg {
    store: PgStore,
    // Dropped with the harness: the case's database.
    _db: TestDatabase,
}

impl SourceHarness for Pg {
    type Source = PgStore;

    async fn new() -> Self {
        let db = TestDatabase::create().await;
        Pg {
            store: db.store(),
            _db: db,
        }
    }

    fn source(&self) -> &PgStore {
        &self.store
    }

    async fn seal(
        &self,
        sealed: &WeightedFairnessPolicy,
        successor: &WeightedFairnessPolicy,
    ) -> u64 {
        self.store
            .rollout(sealed, successor, None)
            .await
            .unwrap()
            .sealed_at_sequence()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_store_passes_the_reservation_source_suite() {
    source_conformance::exercise::<Pg>().await;
}
