//! Service lag: how long a run waited between becoming claimable and its
//! claim (`claimed_at - available_at`, both database times), summarised as
//! nearest-rank percentiles. Pure: no I/O.

use serde::Serialize;

/// The service lag of one side's fed tenants.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Lag {
    /// Runs that became claimable in the window.
    pub runs: usize,
    /// Of them, runs still unclaimed when the side stopped: their lag is
    /// counted up to that moment (a lower bound).
    pub unclaimed: usize,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Largest, milliseconds.
    pub max_ms: f64,
}

impl Lag {
    /// Summarises `lags_ms` (any order); `None` when it is empty.
    pub fn of(mut lags_ms: Vec<f64>, unclaimed: usize) -> Option<Self> {
        lags_ms.sort_by(f64::total_cmp);
        Some(Self {
            runs: lags_ms.len(),
            unclaimed,
            p50_ms: percentile(&lags_ms, 0.50)?,
            p99_ms: percentile(&lags_ms, 0.99)?,
            max_ms: *lags_ms.last()?,
        })
    }
}

/// The nearest-rank percentile `q` (0 < q ≤ 1) of ascending `sorted`: the
/// smallest value with at least `q × n` values at or below it. `None` when
/// `sorted` is empty.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let check = |values: &[f64], q: f64, expected: Option<f64>| {
            assert_eq!(percentile(values, q), expected, "{values:?} at {q}");
        };
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        check(&[], 0.5, None);
        check(&[7.0], 0.5, Some(7.0));
        check(&[7.0], 0.99, Some(7.0));
        check(&[1.0, 2.0], 0.5, Some(1.0));
        check(&[1.0, 2.0], 0.51, Some(2.0));
        check(&[1.0, 2.0, 3.0, 4.0], 0.5, Some(2.0));
        check(&hundred, 0.5, Some(50.0));
        check(&hundred, 0.99, Some(99.0));
        check(&hundred, 1.0, Some(100.0));
        check(&hundred, 0.001, Some(1.0));
        let thousand: Vec<f64> = (1..=1000).map(f64::from).collect();
        check(&thousand, 0.99, Some(990.0));
    }

    #[test]
    fn lag_sorts_and_summarises() {
        let lag = Lag::of(vec![30.0, 10.0, 20.0, 40.0], 1).unwrap();
        assert_eq!(
            lag,
            Lag {
                runs: 4,
                unclaimed: 1,
                p50_ms: 20.0,
                p99_ms: 40.0,
                max_ms: 40.0
            }
        );
        assert_eq!(Lag::of(Vec::new(), 0), None);
    }
}
