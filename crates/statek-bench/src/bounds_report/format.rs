//! How the bounds report writes weight sets, cycles and ratios.

use statek_policy::analysis::BoundRatio;

/// Weight sets listed in full up to this many tenants, else summarised.
const LISTED_TENANTS: usize = 12;

/// A weight set, listed in id order when short, else summarised by weight.
pub fn describe(weights: &[u32]) -> String {
    let length: u32 = weights.iter().sum();
    if weights.len() <= LISTED_TENANTS {
        let listed: Vec<String> = weights.iter().map(u32::to_string).collect();
        return format!("{{{}}} (L = {length})", listed.join(", "));
    }
    let mut by_weight: Vec<(u32, usize)> = Vec::new();
    let mut sorted = weights.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    for weight in sorted {
        match by_weight.last_mut() {
            Some((last, count)) if *last == weight => *count += 1,
            _ => by_weight.push((weight, 1)),
        }
    }
    let mut parts: Vec<String> = by_weight
        .iter()
        .take(6)
        .map(|(weight, count)| format!("{count}×{weight}"))
        .collect();
    if by_weight.len() > 6 {
        parts.push(format!("… {} more weights", by_weight.len() - 6));
    }
    format!(
        "{} tenants, L = {length}: {}",
        weights.len(),
        parts.join(", ")
    )
}

/// A short cycle as letters (`a` = `t0000`), a long one as its length.
pub fn letters(slots: &[u16]) -> String {
    if slots.len() > 64 || slots.iter().any(|&slot| slot >= 26) {
        return format!("({} slots)", slots.len());
    }
    slots
        .iter()
        .map(|&slot| char::from(b'a' + u8::try_from(slot).unwrap_or(25)))
        .collect()
}

/// `1.500 (6/4)`.
pub fn ratio(ratio: BoundRatio) -> String {
    format!(
        "{:.3} ({}/{})",
        ratio.to_f64(),
        ratio.bound(),
        ratio.ideal()
    )
}

/// A share of a count in percent, one decimal.
pub fn percent(part: usize, whole: usize) -> String {
    format!("{:.1} %", 100.0 * part as f64 / whole.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions() {
        assert_eq!(describe(&[3, 2, 1]), "{3, 2, 1} (L = 6)");
        let mut lockstep = vec![1; 1022];
        lockstep.push(2);
        assert_eq!(describe(&lockstep), "1023 tenants, L = 1024: 1×2, 1022×1");
        assert_eq!(letters(&[0, 0, 1, 0]), "aaba");
        assert_eq!(ratio(BoundRatio::new(6, 4)), "1.500 (6/4)");
        assert_eq!(percent(1, 3), "33.3 %");
    }
}
