//! Cost mode's bound (docs/guarantees.md, "Cost mode: the bound") against
//! the library's ledger ([`CostLedger`]) in the setting it is proven for, under adversarial costs and
//! finish delays: never exceeded, and reached within one quantum by a
//! constructed schedule.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use statek_policy::{
    CostFairness, CostLedger, FairnessUnit, SchedulerShardId, TenantFairnessWeight, TenantId,
    WeightedFairnessPolicy,
};

/// The proof's setting around the library's ledger ([`CostLedger`]), slot
/// by slot. At slot `s` (the cycle's tenant `i`): first every attempt
/// finishing at `s` is charged to its tenant; then `i` is credited `q`,
/// its balance capped at `b_cap` (a credit cut by the cap is *clipped*);
/// then the slot is a debt slot if the balance is negative, limited if `D`
/// attempts of `i` are claimed and not yet charged, idle if the adversary
/// has no run for it, else it claims an attempt, charged
/// `min(reported, C_max)` at its finish, at least one slot later.
struct Ledger {
    cost: CostFairness,
    d: usize,
}

#[derive(Debug, Default)]
struct Trace {
    /// Per slot: the charged cost of the attempt it claimed.
    claimed: Vec<Option<u64>>,
    /// Per slot: its tenant's credit was clipped by the cap.
    clipped: Vec<bool>,
    /// Per slot: a debt slot.
    debt: Vec<bool>,
}

impl Ledger {
    fn new(cost: CostFairness, d: usize) -> Self {
        Self { cost, d }
    }

    /// Runs `slots` slots of `cycle` from balances `start` (each in
    /// `[0, b_cap]`, nothing in flight); `attempt(s, balance)` is the
    /// (reported cost, finish delay) of the attempt slot `s` claims, or
    /// `None` for no run (an idle slot), chosen by the adversary, who sees
    /// the balance it claims on.
    fn run(
        &self,
        cycle: &[u16],
        start: &[i128],
        slots: usize,
        mut attempt: impl FnMut(usize, i128) -> Option<(u64, usize)>,
    ) -> Trace {
        let tenants: Vec<TenantId> = (0..start.len())
            .map(|i| TenantId::try_from(format!("t{i}")).unwrap())
            .collect();
        let mut ledger = CostLedger::with_balances(
            self.cost,
            tenants.iter().cloned().zip(start.iter().copied()),
        );
        let mut in_flight = vec![0_usize; start.len()];
        // (finish slot, tenant, reported cost)
        let mut pending: Vec<(usize, usize, u64)> = Vec::new();
        let mut trace = Trace::default();
        for s in 0..slots {
            pending.retain(|&(finish, tenant, cost)| {
                if finish == s {
                    ledger.charge(&tenants[tenant], Some(cost));
                    in_flight[tenant] -= 1;
                    false
                } else {
                    true
                }
            });
            let i = usize::from(cycle[s % cycle.len()]);
            let credit = ledger.credit(&tenants[i]);
            trace.clipped.push(credit.clipped);
            trace.debt.push(credit.is_debt());
            if credit.is_debt() || in_flight[i] >= self.d {
                trace.claimed.push(None);
                continue;
            }
            let Some((reported, delay)) = attempt(s, credit.balance) else {
                trace.claimed.push(None);
                continue;
            };
            pending.push((s + 1 + delay, i, reported));
            in_flight[i] += 1;
            trace.claimed.push(Some(ledger.charged(Some(reported))));
        }
        trace
    }
}

fn policy(weights: &[u32], cost: CostFairness) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        weights.iter().enumerate().map(|(i, &w)| {
            TenantFairnessWeight::new(TenantId::try_from(format!("t{i}")).unwrap(), w).unwrap()
        }),
    )
    .unwrap()
    .with_fairness(FairnessUnit::Cost(cost))
}

/// Checks both sides of the bound for every tenant over every window of
/// `trace`, in the exact scaled form the library computes
/// (`L·S` against `q·|W|·w ± B·L`), and in the per-window form of the
/// proof (`S` against `q·(n(W) − 1) + D·C_max + b_cap` above and
/// `q·n(W) − D·C_max − b_cap` below).
fn check_every_window(p: &WeightedFairnessPolicy, trace: &Trace, d: u32) {
    let cycle = p.cycle_tenant_indexes();
    let l = i128::from(p.cycle_length());
    let slots = trace.claimed.len();
    for (i, bound) in p.cost_bounds().unwrap().enumerate() {
        let w = i128::from(bound.discrepancy().weight());
        let q = i128::from(bound.cost().quantum());
        let fixed = i128::from(d) * i128::from(bound.cost().max_cost())
            + i128::from(bound.cost().balance_cap());
        let slack = i128::try_from(bound.slack_scaled(d)).unwrap();
        // Prefix sums over the tenant's slots: picks, served cost, clips.
        let mut picks = vec![0_i128; slots + 1];
        let mut served = vec![0_i128; slots + 1];
        let mut clips = vec![0_usize; slots + 1];
        for s in 0..slots {
            let mine = usize::from(cycle[s % cycle.len()]) == i;
            picks[s + 1] = picks[s] + i128::from(mine);
            served[s + 1] = served[s] + i128::from(trace.claimed[s].filter(|_| mine).unwrap_or(0));
            clips[s + 1] = clips[s] + usize::from(mine && trace.clipped[s]);
        }
        for a in 0..slots {
            for b in a + 1..=slots {
                let n = picks[b] - picks[a];
                let s = served[b] - served[a];
                let len = (b - a) as i128;
                if n == 0 {
                    assert_eq!(s, 0, "tenant {i} [{a}, {b})");
                } else {
                    assert!(
                        s <= q * (n - 1) + fixed,
                        "tenant {i} [{a}, {b}): {s} > {q}·({n} − 1) + {fixed}"
                    );
                }
                assert!(l * s <= q * len * w + slack, "tenant {i} [{a}, {b})");
                if clips[b] == clips[a] {
                    assert!(
                        s >= q * n - fixed,
                        "tenant {i} [{a}, {b}): {s} < {q}·{n} − {fixed}"
                    );
                    assert!(l * s >= q * len * w - slack, "tenant {i} [{a}, {b})");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Adversarial costs and finish delays: each attempt spends exactly
    /// the balance it claims on, overspends it by `q`, costs `C_max`, or
    /// reports an arbitrary cost up to 3·C_max (charged at most C_max), or
    /// the slot has no run. No window breaks either side.
    #[test]
    fn the_bound_holds_in_every_window(
        weights in proptest::collection::vec(1_u32..=5, 1..=4),
        q in 1_u64..=8,
        c_max in 1_u64..=40,
        b_cap in 0_u64..=60,
        d in 1_usize..=3,
        start in proptest::collection::vec(0_u64..=60, 4),
        script in proptest::collection::vec((0_u8..5, 0_u64..=120, 0_usize..=12), 240),
    ) {
        let cost = CostFairness::new(q, c_max, c_max, b_cap).unwrap();
        let p = policy(&weights, cost);
        let ledger = Ledger::new(cost, d);
        let start: Vec<i128> = start[..weights.len()]
            .iter()
            .map(|&b| i128::from(b.min(b_cap)))
            .collect();
        let trace = ledger.run(p.cycle_tenant_indexes(), &start, script.len(), |s, balance| {
            let (kind, arbitrary, delay) = script[s];
            let balance = u64::try_from(balance).unwrap();
            let cost = match kind {
                0 => balance,
                1 => balance + q,
                2 => c_max,
                3 => arbitrary,
                _ => return None,
            };
            Some((cost, delay))
        });
        check_every_window(&p, &trace, u32::try_from(d).unwrap());
    }

    /// A tenant whose every attempt is charged at most `q` is never in debt
    /// when `b_cap ≥ (D − 1)·q`: each of its slots claims while it has a
    /// free permit, so it gets at least its slot share.
    #[test]
    fn cheap_attempts_never_make_a_debt_slot(
        weights in proptest::collection::vec(1_u32..=5, 1..=4),
        q in 1_u64..=8,
        extra_cap in 0_u64..=20,
        d in 1_usize..=3,
        script in proptest::collection::vec((0_u64..=8, 0_usize..=12), 240),
    ) {
        let b_cap = (d as u64 - 1) * q + extra_cap;
        let cost = CostFairness::new(q, 64, 64, b_cap).unwrap();
        let p = policy(&weights, cost);
        let ledger = Ledger::new(cost, d);
        let start = vec![0_i128; weights.len()];
        let trace = ledger.run(p.cycle_tenant_indexes(), &start, script.len(), |s, _| {
            let (cost, delay) = script[s];
            Some((cost.min(q), delay))
        });
        prop_assert_eq!(trace.debt.iter().filter(|&&debt| debt).count(), 0);
    }
}

/// The cap matters for cheap attempts: with `b_cap = 0` and `D = 2`, two
/// attempts of cost `q` in flight make the third slot a debt slot.
#[test]
fn cheap_attempts_below_a_small_cap_can_owe() {
    let cost = CostFairness::new(10, 10, 10, 0).unwrap();
    let trace = Ledger::new(cost, 2).run(&[0], &[0], 4, |s, _| Some((10, usize::from(s == 0))));
    // Slots 0 and 1 claim (balance 0); both finish at slot 2: −20 + 10;
    // slot 3 is back at 0.
    assert_eq!(
        trace.claimed,
        vec![Some(10), Some(10), None, Some(10)],
        "{trace:?}"
    );
    assert_eq!(trace.debt, vec![false, false, true, false]);
}

/// The upper side is reached exactly: one tenant (every slot is its),
/// starting at `b_cap − q` so that no credit of the window is clipped;
/// each attempt spends what its balance holds, except the one before the
/// last `D`, which overspends by `D·q`, and the last `D`, which cost
/// `C_max` each and finish after the window. Served:
/// `b_cap + q·(n − 1) + D·C_max`, the bound, over the whole window.
#[test]
fn a_constructed_schedule_reaches_the_upper_side_exactly() {
    let (q, c_max, b_cap, n) = (5_u64, 40_u64, 30_u64, 12_usize);
    let cost = CostFairness::new(q, c_max, c_max, b_cap).unwrap();
    let start = [i128::from(b_cap - q)];
    let far = 100;
    // D = 1: slot 0 spends b_cap, then q per slot, slot n−2 spends 2q
    // (leaving −q, which slot n−1's credit brings to 0), slot n−1 C_max.
    let one = Ledger::new(cost, 1).run(&[0], &start, n, |s, _| {
        Some(match s {
            0 => (b_cap, 0),
            s if s == n - 2 => (2 * q, 0),
            s if s == n - 1 => (c_max, far),
            _ => (q, 0),
        })
    });
    // D = 2: slot n−3 spends 3q, finishing at n−1 (so slot n−2 claims
    // C_max on a balance of 2q, and slot n−1 on −q + q = 0).
    let two = Ledger::new(cost, 2).run(&[0], &start, n, |s, _| {
        Some(match s {
            0 => (b_cap, 0),
            s if s == n - 3 => (3 * q, 1),
            s if s >= n - 2 => (c_max, far),
            _ => (q, 0),
        })
    });
    for (d, trace) in [(1_u64, one), (2, two)] {
        assert!(
            trace.claimed.iter().all(Option::is_some),
            "D = {d}: {trace:?}"
        );
        assert!(!trace.clipped.iter().any(|&c| c), "D = {d}: {trace:?}");
        let served: u64 = trace.claimed.iter().flatten().sum();
        assert_eq!(
            served,
            b_cap + q * (n as u64 - 1) + d * c_max,
            "D = {d}: {trace:?}"
        );
        // Every window of the trace keeps both sides.
        check_every_window(&policy(&[1], cost), &trace, u32::try_from(d).unwrap());
    }
}

/// The lower side is reached exactly: a claim of cost `C_max` on a balance
/// of 0 just before the window; in the window, 7 debt slots, then three
/// claims of cost 0, nothing clipped: served 0 = q·10 − C_max − b_cap.
#[test]
fn a_constructed_schedule_reaches_the_lower_side_exactly() {
    let (q, c_max, b_cap) = (5_u64, 40_u64, 10_u64);
    let cost = CostFairness::new(q, c_max, c_max, b_cap).unwrap();
    // Slot 0 claims 10 on a balance of 5, so slot 1 claims C_max on
    // −5 + 5 = 0; the window is slots 2..12: −40 + 5 = −35, debt until
    // slot 9's credit brings it to 0, then claims of cost 0 on 0, 5, 10.
    let trace = Ledger::new(cost, 1).run(&[0], &[0], 12, |s, _| {
        Some(match s {
            0 => (10, 0),
            1 => (c_max, 0),
            _ => (0, 0),
        })
    });
    let mut debt = vec![false, false];
    debt.extend([true; 7]);
    debt.extend([false; 3]);
    assert_eq!(trace.debt, debt);
    let served: u64 = trace.claimed[2..12].iter().flatten().sum();
    assert_eq!(served, 0);
    assert!(!trace.clipped[2..12].iter().any(|&c| c), "{trace:?}");
    // n(W) = 10: q·10 − D·C_max − b_cap = 50 − 40 − 10 = 0.
    assert_eq!(q * 10 - c_max - b_cap, served);
    check_every_window(&policy(&[1], cost), &trace, 1);
}

/// A window across a rollout's seam: the ledger ([`CostLedger`]) runs
/// `old`'s cycle up to the seal at `seal`, takes `new`'s parameters there
/// ([`CostLedger::reconfigure`]: positive balances cut to the new `b_cap`,
/// debts kept) and runs `new`'s cycle from its first position. Tenants
/// are `t0..tk` of either policy (a weight of 0 leaves one out of that
/// side). Each attempt's charge is what the ledger charges at its finish
/// (with the parameters then in force); attempts still running at the end
/// are charged then.
struct SeamRun {
    /// Per slot: the charge of the attempt it claimed.
    claimed: Vec<Option<u64>>,
    clipped: Vec<bool>,
    /// Per tenant: the seal cut its balance.
    cut: Vec<bool>,
    /// Per slot: its tenant (an index of `t0..tk`).
    tenant: Vec<usize>,
}

fn seam_policy(shard: &str, weights: &[u32], cost: CostFairness) -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from(shard).unwrap(),
        weights
            .iter()
            .enumerate()
            .filter(|(_, &w)| w > 0)
            .map(|(i, &w)| {
                TenantFairnessWeight::new(TenantId::try_from(format!("t{i}")).unwrap(), w).unwrap()
            }),
    )
    .unwrap()
    .with_fairness(FairnessUnit::Cost(cost))
}

/// The cycle of `p` as indexes of `t0..tk`.
fn global_cycle(p: &WeightedFairnessPolicy) -> Vec<usize> {
    p.cycle_tenant_indexes()
        .iter()
        .map(|&index| {
            let id = p.tenants()[usize::from(index)].tenant().as_str();
            id[1..].parse().unwrap()
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn run_across_seam(
    old: &WeightedFairnessPolicy,
    new: &WeightedFairnessPolicy,
    seal: usize,
    start: &[i128],
    d: usize,
    slots: usize,
    mut attempt: impl FnMut(usize, i128) -> Option<(u64, usize)>,
) -> SeamRun {
    let tenants: Vec<TenantId> = (0..start.len())
        .map(|i| TenantId::try_from(format!("t{i}")).unwrap())
        .collect();
    let (c1, c2) = (
        *old.fairness().cost().unwrap(),
        *new.fairness().cost().unwrap(),
    );
    let (cycle1, cycle2) = (global_cycle(old), global_cycle(new));
    let mut ledger =
        CostLedger::with_balances(c1, tenants.iter().cloned().zip(start.iter().copied()));
    let mut in_flight = vec![0_usize; start.len()];
    // (finish slot, tenant, reported cost, claim slot)
    let mut pending: Vec<(usize, usize, u64, usize)> = Vec::new();
    let mut run = SeamRun {
        claimed: Vec::new(),
        clipped: Vec::new(),
        cut: vec![false; start.len()],
        tenant: Vec::new(),
    };
    let charge = |ledger: &mut CostLedger,
                  claimed: &mut Vec<Option<u64>>,
                  (_, t, cost, at): (usize, usize, u64, usize)| {
        claimed[at] = Some(ledger.charge(&tenants[t], Some(cost)));
    };
    for s in 0..slots {
        if s == seal {
            for (t, cut) in run.cut.iter_mut().enumerate() {
                *cut = ledger.balance(&tenants[t]) > i128::from(c2.balance_cap());
            }
            ledger.reconfigure(c2);
        }
        let (done, still): (Vec<_>, Vec<_>) = pending.into_iter().partition(|p| p.0 == s);
        pending = still;
        for p in done {
            charge(&mut ledger, &mut run.claimed, p);
            in_flight[p.1] -= 1;
        }
        let i = if s < seal {
            cycle1[s % cycle1.len()]
        } else {
            cycle2[(s - seal) % cycle2.len()]
        };
        run.tenant.push(i);
        let credit = ledger.credit(&tenants[i]);
        run.clipped.push(credit.clipped);
        run.claimed.push(None);
        if credit.is_debt() || in_flight[i] >= d {
            continue;
        }
        if let Some((reported, delay)) = attempt(s, credit.balance) {
            pending.push((s + 1 + delay, i, reported, s));
            in_flight[i] += 1;
        }
    }
    for p in pending {
        charge(&mut ledger, &mut run.claimed, p);
    }
    run
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Across a rollout's seam between two cost-mode policies (other
    /// weights, quanta, `C_max` and caps; tenants joining and leaving),
    /// under adversarial costs and finish delays, every window (straddling
    /// the seal or not) keeps [`statek_policy::CostSeamBound`]'s sides: the
    /// upper always, the lower when no credit of the tenant in it is
    /// clipped and the seal did not cut its balance inside it.
    #[test]
    fn the_bound_holds_across_a_seam(
        old_weights in proptest::collection::vec(0_u32..=4, 4),
        new_weights in proptest::collection::vec(0_u32..=4, 4),
        (q1, q2) in (1_u64..=6, 1_u64..=6),
        (c1, c2) in (1_u64..=30, 1_u64..=30),
        (cap1, cap2) in (0_u64..=40, 0_u64..=40),
        d in 1_usize..=3,
        seal in 1_usize..=120,
        start in proptest::collection::vec(0_u64..=40, 4),
        script in proptest::collection::vec((0_u8..5, 0_u64..=90, 0_usize..=10), 200),
    ) {
        prop_assume!(old_weights.iter().any(|&w| w > 0) && new_weights.iter().any(|&w| w > 0));
        let cost1 = CostFairness::new(q1, c1, c1, cap1).unwrap();
        let cost2 = CostFairness::new(q2, c2, c2, cap2).unwrap();
        let old = seam_policy("primary-v1", &old_weights, cost1);
        let new = seam_policy("primary-v2", &new_weights, cost2);
        let start: Vec<i128> = start.iter().map(|&b| i128::from(b.min(cap1))).collect();
        let q_max = q1.max(q2);
        let c_max = c1.max(c2);
        let run = run_across_seam(&old, &new, seal, &start, d, script.len(), |s, balance| {
            let (kind, arbitrary, delay) = script[s];
            let balance = u64::try_from(balance).unwrap();
            let cost = match kind {
                0 => balance,
                1 => balance + q_max,
                2 => c_max,
                3 => arbitrary,
                _ => return None,
            };
            Some((cost, delay))
        });
        let bounds = statek_policy::PolicySeam::new(&old, &new).cost_bounds().unwrap();
        let slots = run.claimed.len();
        for bound in &bounds {
            let i: usize = bound.tenant().as_str()[1..].parse().unwrap();
            let scale = i128::from(bound.scale());
            let slack = i128::try_from(bound.slack_scaled(u32::try_from(d).unwrap())).unwrap();
            let fixed = i128::try_from(d).unwrap() * i128::from(c_max)
                + i128::from(cap1.max(cap2));
            for a in 0..slots {
                let (mut served, mut credits, mut first_q, mut clip) = (0_i128, 0_i128, None, false);
                for b in a + 1..=slots {
                    let s = b - 1;
                    if run.tenant[s] == i {
                        let q = i128::from(if s < seal { q1 } else { q2 });
                        credits += q;
                        first_q.get_or_insert(q);
                        clip |= run.clipped[s];
                        served += i128::from(run.claimed[s].unwrap_or(0));
                    }
                    let (len1, len2) = (seal.clamp(a, b) - a, b - seal.clamp(a, b));
                    let entitled = i128::try_from(
                        bound.entitled_scaled(len1 as u64, len2 as u64),
                    )
                    .unwrap();
                    prop_assert!(
                        served * scale <= entitled + slack,
                        "t{} [{}, {}) seal {}: S {} above E + B", i, a, b, seal, served
                    );
                    if let Some(first) = first_q {
                        prop_assert!(served <= credits - first + fixed, "t{} [{}, {})", i, a, b);
                    } else {
                        prop_assert_eq!(served, 0);
                    }
                    let cut_inside = run.cut[i] && a < seal && seal < b;
                    if !clip && !cut_inside {
                        prop_assert!(
                            served * scale >= entitled - slack,
                            "t{} [{}, {}) seal {}: S {} below E − B", i, a, b, seal, served
                        );
                        prop_assert!(served >= credits - fixed, "t{} [{}, {})", i, a, b);
                    }
                }
            }
        }
    }
}
