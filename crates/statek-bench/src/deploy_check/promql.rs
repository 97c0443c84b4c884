//! PromQL references to statek metrics: found in an expression, resolved
//! against the catalogue (suffixes and label matchers checked).

use super::catalogue::MetricKind::{Counter, Gauge, Histogram};
use super::catalogue::{Metric, HISTOGRAM_SUFFIXES, METRICS};

/// A metric named in a PromQL expression, with the labels its selector
/// matches on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The series name as written (`statek_..._bucket` included).
    pub name: String,
    /// Label names of the selector's matchers, in order.
    pub labels: Vec<String>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Every `statek_*` identifier of a PromQL expression (outside string
/// literals), with the label names of its `{...}` selector.
///
/// # Errors
/// An unterminated string or a malformed selector after a statek metric.
pub fn metric_references(expr: &str) -> std::result::Result<Vec<Reference>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut references = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&chars, i)?;
        } else if is_name_char(c) {
            let start = i;
            while i < chars.len() && is_name_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if word.starts_with("statek_") {
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let labels = if chars.get(j) == Some(&'{') {
                    let (labels, end) = selector_labels(&chars, j, &word)?;
                    i = end;
                    labels
                } else {
                    Vec::new()
                };
                references.push(Reference { name: word, labels });
            }
        } else {
            i += 1;
        }
    }
    Ok(references)
}

/// Index just past the string literal starting at `start`.
fn skip_string(chars: &[char], start: usize) -> std::result::Result<usize, String> {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(format!("unterminated string starting at character {start}"))
}

/// Label names of the selector `{...}` at `open`, and the index past `}`.
fn selector_labels(
    chars: &[char],
    open: usize,
    metric: &str,
) -> std::result::Result<(Vec<String>, usize), String> {
    let malformed = |i: usize| format!("malformed label selector of {metric} at character {i}");
    let skip_ws = |mut i: usize| {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let mut labels = Vec::new();
    let mut i = skip_ws(open + 1);
    loop {
        match chars.get(i) {
            Some('}') => return Ok((labels, i + 1)),
            Some(c) if is_name_char(*c) => {}
            _ => return Err(malformed(i)),
        }
        let start = i;
        while i < chars.len() && is_name_char(chars[i]) {
            i += 1;
        }
        labels.push(chars[start..i].iter().collect());
        i = skip_ws(i);
        let operator: String = chars[i..chars.len().min(i + 2)].iter().collect();
        i += if operator == "=~" || operator == "!~" || operator == "!=" {
            2
        } else if operator.starts_with('=') {
            1
        } else {
            return Err(malformed(i));
        };
        i = skip_ws(i);
        if !matches!(chars.get(i), Some('"' | '\'' | '`')) {
            return Err(malformed(i));
        }
        i = skip_ws(skip_string(chars, i)?);
        match chars.get(i) {
            Some(',') => i = skip_ws(i + 1),
            Some('}') => {}
            _ => return Err(malformed(i)),
        }
    }
}

/// The metric of [`METRICS`] a reference names, checking suffixes and labels.
///
/// # Errors
/// An unknown name, a histogram without (or another kind with) a
/// `_bucket`/`_sum`/`_count` suffix, or a label the metric does not have.
pub fn resolve(reference: &Reference) -> std::result::Result<&'static Metric, String> {
    let name = reference.name.as_str();
    let valid_name = name.strip_prefix("statek_").is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    });
    if !valid_name {
        return Err(format!(
            "{name} is not a statek metric name (statek_[a-z_]+)"
        ));
    }
    let find = |n: &str| METRICS.iter().find(|m| m.name == n);
    let (metric, suffix) = match find(name) {
        Some(metric) => (metric, None),
        None => HISTOGRAM_SUFFIXES
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .and_then(find)
                    .map(|metric| (metric, Some(*suffix)))
            })
            .ok_or_else(|| format!("{name} is not a metric statek emits"))?,
    };
    match (metric.kind, suffix) {
        (Histogram, None) => {
            return Err(format!(
                "{name} is a histogram: query {name}_bucket, {name}_sum or {name}_count"
            ))
        }
        (Counter | Gauge, Some(suffix)) => {
            return Err(format!(
                "{} is a {:?}, it has no {suffix} series",
                metric.name, metric.kind
            ))
        }
        _ => {}
    }
    for label in &reference.labels {
        let allowed =
            metric.labels.contains(&label.as_str()) || (suffix == Some("_bucket") && label == "le");
        if !allowed {
            return Err(format!(
                "{name} has no label {label} (labels: {})",
                if metric.labels.is_empty() {
                    "none".to_owned()
                } else {
                    metric.labels.join(", ")
                }
            ));
        }
    }
    Ok(metric)
}
