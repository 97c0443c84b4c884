//! Samples of section `workloads`: several per side, sides interleaved
//! (fair, plain, batched, then again), so a slow stretch of a shared
//! machine falls on every side alike; each side is judged by the median
//! of its judged samples and reported with their range. A sample whose
//! backlog ran dry inside the window (`drained`) is kept in the results
//! but never judged. Pure: no I/O.

use super::results::{Range, Side};

/// Samples per side and setting (a `--quick` run takes 1).
pub const SAMPLES: u32 = 3;

/// How many times a drained sample is run again, each time with twice the
/// backlog, before the side is left without that judged sample.
pub const DRAINED_RETRIES: u32 = 2;

/// Whether a sample drained: some backlogged tenant had no available run
/// left at the window's end (`left`: its available runs then).
pub fn drained(left: &[i64]) -> bool {
    left.contains(&0)
}

/// The median of `values` (the lower middle one for an even count);
/// `None` for none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len().checked_sub(1)? / 2;
    sorted.get(middle).copied()
}

/// Per side name, in the order of `names`: the judged (not drained)
/// sample of median runs/s, with the judged samples' range, and the
/// median of their fed-tenant lag percentiles. A side with no judged
/// sample has no row.
pub fn summarize(samples: &[Side], names: &[&str]) -> Vec<Side> {
    let mut rows = Vec::new();
    for name in names {
        let judged: Vec<&Side> = samples
            .iter()
            .filter(|s| s.side == *name && !s.drained)
            .collect();
        let rates: Vec<f64> = judged.iter().map(|s| s.runs_per_second).collect();
        let Some(middle) = median(&rates) else {
            continue;
        };
        let Some(chosen) = judged.iter().find(|s| s.runs_per_second == middle) else {
            continue;
        };
        let mut row = (*chosen).clone();
        row.range = Some(Range {
            low: rates.iter().copied().fold(f64::INFINITY, f64::min),
            high: rates.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            samples: u32::try_from(judged.len()).unwrap_or(u32::MAX),
        });
        if let Some(lag) = row.lag.as_mut() {
            let lags: Vec<_> = judged.iter().filter_map(|s| s.lag.as_ref()).collect();
            let p50: Vec<f64> = lags.iter().map(|l| l.p50_ms).collect();
            let p99: Vec<f64> = lags.iter().map(|l| l.p99_ms).collect();
            lag.p50_ms = median(&p50).unwrap_or(lag.p50_ms);
            lag.p99_ms = median(&p99).unwrap_or(lag.p99_ms);
        }
        rows.push(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::super::lag::Lag;
    use super::super::results::{BATCHED, FAIR, PLAIN};
    use super::*;

    fn sample(side: &str, sample: u32, runs_per_second: f64, drained: bool) -> Side {
        Side {
            side: side.to_owned(),
            runs: 0,
            seconds: 4.0,
            runs_per_second,
            slots_per_second: None,
            lag: None,
            backlog_left: None,
            sample,
            drained,
            backlog_scale: 1,
            work: None,
            range: None,
            statements: Vec::new(),
        }
    }

    #[test]
    fn the_median_of_three_is_the_middle_one_and_of_none_nothing() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.0));
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 1.0, 7.0]), Some(1.0));
    }

    #[test]
    fn a_drained_sample_is_never_judged() {
        assert!(drained(&[12, 0]));
        assert!(!drained(&[12, 1]));
        assert!(!drained(&[]));
        let samples = vec![
            sample(FAIR, 0, 1000.0, false),
            sample(PLAIN, 0, 9000.0, true),
            sample(FAIR, 1, 3000.0, false),
            sample(PLAIN, 0, 2000.0, false),
            sample(FAIR, 2, 2000.0, false),
            sample(PLAIN, 1, 2500.0, false),
            sample(PLAIN, 2, 1500.0, false),
            sample(BATCHED, 0, 4000.0, true),
        ];
        let rows = summarize(&samples, &[FAIR, PLAIN, BATCHED]);
        let got: Vec<(&str, u32, f64, Option<Range>)> = rows
            .iter()
            .map(|r| (r.side.as_str(), r.sample, r.runs_per_second, r.range))
            .collect();
        assert_eq!(
            got,
            [
                (
                    FAIR,
                    2,
                    2000.0,
                    Some(Range {
                        low: 1000.0,
                        high: 3000.0,
                        samples: 3
                    })
                ),
                (
                    PLAIN,
                    0,
                    2000.0,
                    Some(Range {
                        low: 1500.0,
                        high: 2500.0,
                        samples: 3
                    })
                ),
            ]
        );
    }

    #[test]
    fn lag_percentiles_are_the_medians_of_the_samples() {
        let with_lag = |n: u32, rate: f64, p50: f64, p99: f64| {
            let mut s = sample(FAIR, n, rate, false);
            s.lag = Some(Lag {
                runs: 10,
                unclaimed: 0,
                p50_ms: p50,
                p99_ms: p99,
                max_ms: p99,
            });
            s
        };
        let rows = summarize(
            &[
                with_lag(0, 100.0, 1.0, 50.0),
                with_lag(1, 200.0, 3.0, 10.0),
                with_lag(2, 300.0, 2.0, 30.0),
            ],
            &[FAIR],
        );
        let lag = rows[0].lag.as_ref().unwrap();
        assert_eq!((rows[0].sample, lag.p50_ms, lag.p99_ms), (1, 2.0, 30.0));
    }
}
